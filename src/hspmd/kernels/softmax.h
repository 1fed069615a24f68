// Softmax over the last dimension, numerically stable (subtracts the row max).
//   bwd: dx = y * (dy - sum(dy * y, last dim))
#pragma once

#include "hspmd/core/tensor.h"

namespace hspmd::kernels {

void softmax_fwd(const Tensor& x, const Tensor& y);
void softmax_bwd(const Tensor& y, const Tensor& dy, const Tensor& dx);

}  // namespace hspmd::kernels
