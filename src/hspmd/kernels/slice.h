// Copies between regions of tensors: the building blocks of resharding.
//
//   copy_region(src, {0, 4}, dst, {2, 0}, {3, 4}) copies the box src[0:3, 4:8] into dst[2:5, 0:4].
//   slice(x, 1, 4, 4, out)            out = x[:, 4:8]
//   concat({a, b}, 0, out)            out = [a; b]
//
// Any dtype; src and dst have the same dtype and rank. Regions are checked against both shapes.
#pragma once

#include <cstdint>
#include <vector>

#include "hspmd/core/tensor.h"

namespace hspmd::kernels {

void copy_region(const Tensor& src, const std::vector<int64_t>& src_starts, const Tensor& dst,
                 const std::vector<int64_t>& dst_starts, const std::vector<int64_t>& extents);
void slice(const Tensor& x, int dim, int64_t start, int64_t length, const Tensor& out);
void concat(const std::vector<Tensor>& inputs, int dim, const Tensor& out);

}  // namespace hspmd::kernels
