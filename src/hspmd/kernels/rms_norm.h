// RMSNorm over the last dimension (Llama):
//   y[t, :] = x[t, :] * rstd[t] * weight[:],   rstd[t] = 1 / sqrt(mean(x[t, :]^2) + eps)
// x [T, H] (any leading dims flatten into T), weight [H], rstd [T] float32/float64 like x (saved
// for the backward). dweight is the sum over all T rows (overwritten).
#pragma once

#include "hspmd/core/tensor.h"

namespace hspmd::kernels {

void rms_norm_fwd(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd);
void rms_norm_bwd(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                  const Tensor& dweight);

}  // namespace hspmd::kernels
