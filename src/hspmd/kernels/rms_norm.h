// RMSNorm over the last dimension (Llama):
//   y[t, :] = x[t, :] * rstd[t] * (weight_offset + weight[:]),   rstd[t] = 1 / sqrt(mean(x[t, :]^2) + eps)
// weight_offset is 0 for Llama and 1 for Gemma (whose weights hold the scale minus one).
// x [T, H] (any leading dims flatten into T), weight [H], rstd [T] float32/float64 like x (saved
// for the backward). dweight is the sum over all T rows (overwritten).
#pragma once

#include "hspmd/core/tensor.h"

namespace hspmd::kernels {

void rms_norm_fwd(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd,
                  double weight_offset = 0.0);
void rms_norm_bwd(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                  const Tensor& dweight, double weight_offset = 0.0);

}  // namespace hspmd::kernels
