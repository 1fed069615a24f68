// Conversion between any two dtypes (float32, float64, bfloat16, int32, int64). Floating to
// bfloat16 rounds to nearest even; floating to integer truncates toward zero.
#pragma once

#include "hspmd/core/tensor.h"

namespace hspmd::kernels {

void cast(const Tensor& x, const Tensor& out);

}  // namespace hspmd::kernels
