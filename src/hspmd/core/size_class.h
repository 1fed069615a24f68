// The size classes of the caching allocators (core/allocator.h on the host, core/block_pool.h for
// devices): the block a request of `bytes` gets. 64-byte multiples up to 1 KiB, then 8 classes per
// power of two, so a request reuses a block at most 12.5% larger than it (shapes that differ
// slightly from step to step, e.g. a batch's token count, still hit) and every block is a multiple
// of 64 bytes (aligned_alloc's requirement; a cache line).
//
//   size_class_bytes(1)    == 64
//   size_class_bytes(1000) == 1024
//   size_class_bytes(1025) == 1152     (1024 / 8 = 128-byte steps up to 2048)
//   size_class_bytes(3000) == 3072     (256-byte steps up to 4096)
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>

namespace hspmd {

inline constexpr size_t kSizeClassAlignment = 64;

// Defined for bytes <= SIZE_MAX / 2 (beyond, the rounding would overflow).
constexpr size_t size_class_bytes(size_t bytes) {
  if (bytes <= 1024) {
    return std::max(kSizeClassAlignment, (bytes + kSizeClassAlignment - 1) / kSizeClassAlignment * kSizeClassAlignment);
  }
  const size_t step = std::bit_floor(bytes - 1) / 8;
  return (bytes + step - 1) / step * step;
}

}  // namespace hspmd
