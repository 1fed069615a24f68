#include "hspmd/core/allocator.h"

#include <atomic>
#include <cstdlib>
#include <new>

#include "hspmd/core/error.h"

namespace hspmd {

namespace {
constexpr size_t kAlignment = 64;  // a cache line; enough for any SIMD load
}

// The state every handle and every tensor's storage shares.
class Allocator::Pool {
 public:
  explicit Pool(Options options) : options_(std::move(options)) {}

  void* allocate(size_t bytes) {
    size_t in_use = current_.fetch_add(bytes) + bytes;
    const size_t capacity = capacity_.load();
    if (capacity != 0 && in_use > capacity) {
      current_.fetch_sub(bytes);
      throw OutOfMemoryError("out of memory on " + options_.name + ": requested " + std::to_string(bytes) +
                             " bytes with " + std::to_string(in_use - bytes) + " bytes in use and a capacity of " +
                             std::to_string(capacity) + " bytes");
    }
    size_t peak = peak_.load();
    while (in_use > peak && !peak_.compare_exchange_weak(peak, in_use)) {
    }
    size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* ptr = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    if (ptr == nullptr) {
      current_.fetch_sub(bytes);
      throw OutOfMemoryError("out of host memory on " + options_.name + ": requested " + std::to_string(bytes) +
                             " bytes");
    }
    return ptr;
  }

  void deallocate(void* ptr, size_t bytes) noexcept {
    std::free(ptr);
    current_.fetch_sub(bytes);
  }

  size_t current_bytes() const { return current_.load(); }
  size_t peak_bytes() const { return peak_.load(); }
  void reset_peak() { peak_.store(current_.load()); }
  size_t capacity_bytes() const { return capacity_.load(); }
  // Atomic: ranks share nothing, but the process default is shared by every thread.
  void set_capacity_bytes(size_t bytes) { capacity_.store(bytes); }
  const std::string& name() const { return options_.name; }  // never changes

 private:
  const Options options_;
  std::atomic<size_t> capacity_{options_.capacity_bytes};
  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};
};

Allocator::Allocator(Options options) : pool_(std::make_shared<Pool>(std::move(options))) {}
Allocator::~Allocator() = default;

Allocator& Allocator::process_default() {
  static Allocator allocator;
  return allocator;
}

void* Allocator::allocate(size_t bytes) { return pool_->allocate(bytes); }
void Allocator::deallocate(void* ptr, size_t bytes) noexcept { pool_->deallocate(ptr, bytes); }
size_t Allocator::current_bytes() const { return pool_->current_bytes(); }
size_t Allocator::peak_bytes() const { return pool_->peak_bytes(); }
void Allocator::reset_peak() { pool_->reset_peak(); }
size_t Allocator::capacity_bytes() const { return pool_->capacity_bytes(); }
void Allocator::set_capacity_bytes(size_t bytes) { pool_->set_capacity_bytes(bytes); }
const std::string& Allocator::name() const { return pool_->name(); }

}  // namespace hspmd
