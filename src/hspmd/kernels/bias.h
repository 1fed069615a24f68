// Bias of a linear layer (Hugging Face attention_bias / mlp_bias): y[..., n] = x[..., n] + bias[n]
// for x [..., N] of rank >= 1 and bias [N] of x's dtype. y may be x itself. float32, float64.
// The bias's gradient is dy summed over its leading dims (kernels::sum, reduce.h).
#pragma once

#include "hspmd/core/tensor.h"

namespace hspmd::kernels {

void bias_add(const Tensor& x, const Tensor& bias, const Tensor& y);

}  // namespace hspmd::kernels
