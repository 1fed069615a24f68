// Rotary position embedding, Hugging Face Llama convention (rotate-half): for head dim D and
// i < D/2, with angle = position * theta^(-2i/D):
//   y[i]       = x[i] cos - x[i + D/2] sin
//   y[i + D/2] = x[i + D/2] cos + x[i] sin
// x, y [T, N, D] (T tokens, N heads); positions [T] int64 or int32, given per token so packed
// sequences restart at 0. The backward is the rotation by -angle.
#pragma once

#include "hspmd/core/tensor.h"

namespace hspmd::kernels {

void rope_fwd(const Tensor& x, const Tensor& positions, double theta, const Tensor& y);
void rope_bwd(const Tensor& dy, const Tensor& positions, double theta, const Tensor& dx);

}  // namespace hspmd::kernels
