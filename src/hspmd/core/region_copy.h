// A box copied between two row-major tensors, as a few strided copies of at most three
// dimensions: what a device's copy engine takes in one call (cudaMemcpy3DAsync), so the CUDA
// backend's slice, concat and resharding copies need no kernel of their own.
//
//   copy the box src[0:3, 4:8] of src [3, 8] float32 into dst[2:5, 0:4] of dst [6, 4]:
//   plan_region_copy({3, 8}, {0, 4}, {6, 4}, {2, 0}, {3, 4}, 4)
//     -> one StridedCopy: 3 runs of 16 bytes, src from byte 16 with pitch 32, dst from byte 32
//        with pitch 16
//
// Dimensions the box covers whole in both tensors merge with the one outside them (n of the N
// heads of [B, S, N, D] are B*S runs of n*D elements: one copy), so the common cases are one copy;
// a box that stays of rank 4 or more after merging is one copy per index of its outer dimensions.
#pragma once

#include <cstdint>
#include <vector>

namespace hspmd {

// depth planes of height runs of width contiguous bytes. Run y of plane z starts at
// offset + (z * rows + y) * pitch in each buffer (rows: the runs between two planes' starts).
struct StridedCopy {
  int64_t width = 0;
  int64_t height = 1;
  int64_t depth = 1;
  int64_t src_offset = 0, src_pitch = 0, src_rows = 1;
  int64_t dst_offset = 0, dst_pitch = 0, dst_rows = 1;
};

// The copies moving the box of `extents` at src_starts in src_shape to dst_starts in dst_shape,
// for elements of element_bytes. Empty for an empty box. Throws Error naming the dimension when
// the ranks differ or the box does not fit either tensor.
std::vector<StridedCopy> plan_region_copy(const std::vector<int64_t>& src_shape, const std::vector<int64_t>& src_starts,
                                          const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& dst_starts,
                                          const std::vector<int64_t>& extents, int64_t element_bytes);

}  // namespace hspmd
