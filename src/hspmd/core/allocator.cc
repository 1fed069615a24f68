#include "hspmd/core/allocator.h"

#include <cstdlib>
#include <new>

#include "hspmd/core/error.h"

namespace hspmd {

namespace {
constexpr size_t kAlignment = 64;  // a cache line; enough for any SIMD load
}

Allocator::Allocator(Options options) : options_(std::move(options)) {}

Allocator& Allocator::process_default() {
  static Allocator allocator;
  return allocator;
}

void* Allocator::allocate(size_t bytes) {
  size_t in_use = current_.fetch_add(bytes) + bytes;
  if (options_.capacity_bytes != 0 && in_use > options_.capacity_bytes) {
    current_.fetch_sub(bytes);
    throw OutOfMemoryError("out of memory on " + options_.name + ": requested " + std::to_string(bytes) +
                           " bytes with " + std::to_string(in_use - bytes) + " bytes in use and a capacity of " +
                           std::to_string(options_.capacity_bytes) + " bytes");
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

void Allocator::deallocate(void* ptr, size_t bytes) noexcept {
  std::free(ptr);
  current_.fetch_sub(bytes);
}

}  // namespace hspmd
