// Sum reductions. out holds x summed over `dims` (any set of distinct dims, negative allowed);
// out.numel() must equal the product of the kept dims (keep-dim or squeezed shape: same layout).
// float32 (accumulated in float64), float64.
#pragma once

#include <vector>

#include "hspmd/core/tensor.h"

namespace hspmd::kernels {

void sum(const Tensor& x, const std::vector<int>& dims, const Tensor& out);
// Sum of all elements, returned in float64 (losses, norms).
double sum_all(const Tensor& x);
// Sum of squares of all elements in float64 (global-norm gradient clipping).
double sum_squares(const Tensor& x);

}  // namespace hspmd::kernels
