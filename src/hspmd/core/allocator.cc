#include "hspmd/core/allocator.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <new>
#include <unordered_map>

#include "hspmd/core/error.h"
#include "hspmd/core/size_class.h"

namespace hspmd {

namespace {

constexpr size_t kAlignment = kSizeClassAlignment;  // a cache line; enough for any SIMD load

// The block a request of `bytes` gets (core/size_class.h).
size_t block_bytes(size_t bytes) { return size_class_bytes(bytes); }

OutOfMemoryError capacity_exceeded(const std::string& name, size_t bytes, size_t in_use, size_t capacity) {
  return OutOfMemoryError("out of memory on " + name + ": requested " + std::to_string(bytes) + " bytes with " +
                          std::to_string(in_use) + " bytes in use and a capacity of " + std::to_string(capacity) +
                          " bytes");
}

OutOfMemoryError host_exhausted(const std::string& name, size_t bytes) {
  return OutOfMemoryError("out of host memory on " + name + ": requested " + std::to_string(bytes) + " bytes");
}

// The state every handle and every tensor's storage shares. One mutex guards it all: allocations
// are per tensor, far coarser than the lock, and the common miss (a new block) is made outside it.
class HostPool final : public MemoryBackend {
 public:
  explicit HostPool(Allocator::Options options) : options_(std::move(options)) {}
  ~HostPool() override { evict_until(0); }  // no block can still be live: each storage holds a handle
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  Device device() const override { return Device::cpu(); }

  void* allocate(size_t bytes) override {
    // Past SIZE_MAX / 2, block_bytes would overflow; no host has that much memory anyway.
    if (bytes > SIZE_MAX / 2) throw host_exhausted(options_.name, bytes);
    std::unique_lock lock(mu_);
    if (options_.capacity_bytes != 0 && in_use_ + bytes > options_.capacity_bytes) {
      throw capacity_exceeded(options_.name, bytes, in_use_, options_.capacity_bytes);
    }
    const size_t block = block_bytes(bytes);
    in_use_ += bytes;
    peak_ = std::max(peak_, in_use_);
    held_ += block;
    held_ever_ = std::max(held_ever_, held_);
    if (void* cached = take(block)) return cached;
    evict_until(cache_limit());  // the new block leaves less of the capacity for the cache
    lock.unlock();
    if (void* ptr = std::aligned_alloc(kAlignment, block)) return ptr;
    lock.lock();
    evict_until(0);  // the host may be short only because of the blocks this pool keeps
    if (void* ptr = std::aligned_alloc(kAlignment, block)) return ptr;
    in_use_ -= bytes;
    held_ -= block;
    throw host_exhausted(options_.name, bytes);
  }

  void deallocate(void* ptr, size_t bytes) noexcept override {
    const size_t block = block_bytes(bytes);
    std::lock_guard lock(mu_);
    in_use_ -= bytes;
    held_ -= block;
    if (!cache(ptr, block)) std::free(ptr);
    evict_until(cache_limit());  // the newest block stays, the oldest make room
  }

  size_t current_bytes() const override {
    std::lock_guard lock(mu_);
    return in_use_;
  }
  size_t peak_bytes() const override {
    std::lock_guard lock(mu_);
    return peak_;
  }
  void reset_peak() override {
    std::lock_guard lock(mu_);
    peak_ = in_use_;
  }
  size_t capacity_bytes() const override {
    std::lock_guard lock(mu_);
    return options_.capacity_bytes;
  }
  void set_capacity_bytes(size_t bytes) override {
    std::lock_guard lock(mu_);
    options_.capacity_bytes = bytes;
    evict_until(cache_limit());
  }
  const std::string& name() const override { return options_.name; }  // never changes

  // Host memory only: the copies a host tensor needs are Tensor's own memmove and memset.
  void copy(void* dst, Device, const void* src, Device, size_t bytes) override { std::memmove(dst, src, bytes); }
  void zero(void* ptr, size_t bytes) override { std::memset(ptr, 0, bytes); }
  size_t cached_bytes() const override {
    std::lock_guard lock(mu_);
    return cached_;
  }
  void release_cached() override {
    std::lock_guard lock(mu_);
    evict_until(0);
  }

 private:
  struct Block {
    void* ptr;
    size_t bytes;
  };
  using Age = std::list<Block>::iterator;

  // The most the cache may hold. No more than the pool has ever held live: a training step frees
  // and reallocates the same blocks, so that is what the next step reuses, and the cache can at
  // most double what a run holds. With a capacity, no more than the capacity leaves beside the
  // live blocks: the cache lives in the emulated device's memory, and a request that fits the
  // capacity must never fail because of it.
  size_t cache_limit() const {
    const size_t capacity = options_.capacity_bytes;
    if (capacity == 0) return held_ever_;
    return std::min(held_ever_, capacity > held_ ? capacity - held_ : 0);
  }

  // A cached block of exactly `block` bytes, the one freed last (its lines may still be in the CPU
  // cache), or nullptr.
  void* take(size_t block) {
    auto it = by_size_.find(block);
    if (it == by_size_.end() || it->second.empty()) return nullptr;
    const Age age = it->second.back();
    it->second.pop_back();
    void* ptr = age->ptr;
    by_age_.erase(age);
    cached_ -= block;
    return ptr;
  }

  // Keeps ptr for reuse; false if the bookkeeping itself cannot get memory (then the caller frees).
  bool cache(void* ptr, size_t block) noexcept {
    try {
      std::deque<Age>& same_size = by_size_[block];
      by_age_.push_back({ptr, block});
      try {
        same_size.push_back(std::prev(by_age_.end()));
      } catch (const std::bad_alloc&) {
        by_age_.pop_back();
        return false;
      }
    } catch (const std::bad_alloc&) {
      return false;
    }
    cached_ += block;
    return true;
  }

  // Frees the blocks freed longest ago until the cache holds at most `max_cached` bytes.
  void evict_until(size_t max_cached) noexcept {
    while (cached_ > max_cached) {
      const Block oldest = by_age_.front();
      // Blocks of one size are queued in the order they were freed, so the oldest overall is the
      // oldest of its size.
      std::deque<Age>& same_size = by_size_.find(oldest.bytes)->second;
      same_size.pop_front();
      if (same_size.empty()) by_size_.erase(oldest.bytes);
      by_age_.pop_front();
      cached_ -= oldest.bytes;
      std::free(oldest.ptr);
    }
  }

  mutable std::mutex mu_;
  Allocator::Options options_;
  size_t in_use_ = 0;     // requested bytes of live allocations: what current_bytes() reports
  size_t peak_ = 0;       // of in_use_, since reset_peak
  size_t held_ = 0;       // block bytes of live allocations (in_use_ plus size-class rounding)
  size_t held_ever_ = 0;  // the most held_ has been: bounds the cache
  size_t cached_ = 0;     // block bytes in the cache
  std::list<Block> by_age_;  // cached blocks, freed longest ago first
  std::unordered_map<size_t, std::deque<Age>> by_size_;
};

}  // namespace

Allocator::Allocator(Options options) : pool_(std::make_shared<HostPool>(std::move(options))) {}
Allocator::Allocator(std::shared_ptr<MemoryBackend> backend) : pool_(std::move(backend)) {
  HSPMD_ASSERT(pool_ != nullptr) << "Allocator of a null backend";
  device_ = pool_->device();
}
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
size_t Allocator::cached_bytes() const { return pool_->cached_bytes(); }
void Allocator::release_cached() { pool_->release_cached(); }

}  // namespace hspmd
