// Rotary position embedding, Hugging Face Llama convention (rotate-half): for head dim D and
// i < D/2, with angle = position * inv_freq[i] (inv_freq[i] = theta^(-2i/D) unscaled; a scaled
// RoPE such as Llama 3.1's passes its own inverse frequencies, models/rope_parameters.h):
//   y[i]       = x[i] cos - x[i + D/2] sin
//   y[i + D/2] = x[i + D/2] cos + x[i] sin
// x, y [T, N, D] (T tokens, N heads); positions [T] int64 or int32, given per token so packed
// sequences restart at 0. The backward is the rotation by -angle.
#pragma once

#include <span>

#include "hspmd/core/tensor.h"

namespace hspmd::kernels {

// inv_freq holds D/2 positive values.
void rope_fwd(const Tensor& x, const Tensor& positions, std::span<const double> inv_freq, const Tensor& y);
void rope_bwd(const Tensor& dy, const Tensor& positions, std::span<const double> inv_freq, const Tensor& dx);
// The unscaled inverse frequencies theta^(-2i/D).

void rope_fwd(const Tensor& x, const Tensor& positions, double theta, const Tensor& y);
void rope_bwd(const Tensor& dy, const Tensor& positions, double theta, const Tensor& dx);

}  // namespace hspmd::kernels
