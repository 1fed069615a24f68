// One AdamW step in place (decoupled weight decay, PyTorch's torch.optim.AdamW semantics):
//   g = grad_scale * grad                      (global-norm clipping, in the same pass)
//   param *= 1 - lr * weight_decay
//   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
//   param -= lr * (m / (1 - beta1^step)) / (sqrt(v / (1 - beta2^step)) + eps)
// param, grad, m, v: same numel, float32 (master weights) or float64. step counts from 1.
#pragma once

#include <cstdint>

#include "hspmd/core/tensor.h"

namespace hspmd::kernels {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
  // The gradient is multiplied by this (rounded to the tensors' dtype) before use: clipping's
  // factor, applied here rather than by a separate pass over every gradient. grad is not changed.
  double grad_scale = 1.0;
};

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, int64_t step,
                const AdamWOptions& options);

}  // namespace hspmd::kernels
