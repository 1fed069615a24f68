// Matrix multiplication: float32 on oneDNN's sgemm, float64 on OpenBLAS (kernels/gemm_backend.h).
//
//   out[..., M, N] = alpha * op(a)[..., M, K] @ op(b)[..., K, N] + beta * out
//
// op(x) is x or its transpose (of the last two dims) per options. Batched: a and b have the same
// leading (batch) dims, or b is 2-D and shared by every batch (the weight of a linear layer:
// x[B*S, H] @ W^T with W[F, H] is matmul(x, W, y, {.trans_b = true})). bfloat16 inputs and outputs
// are computed in float32.
#pragma once

#include "hspmd/core/tensor.h"

namespace hspmd::kernels {

struct MatmulOptions {
  bool trans_a = false;  // use a^T (last two dims)
  bool trans_b = false;  // use b^T (last two dims)
  double alpha = 1.0;
  double beta = 0.0;     // 1.0 accumulates into out
  // float32 only: each operand rounded to bfloat16 before the product (bf16 mixed precision,
  // kernels/bf16_rounding.h); accumulation and out stay float32.
  bool bf16_operands = false;
};

void matmul(const Tensor& a, const Tensor& b, const Tensor& out, const MatmulOptions& options = {});

}  // namespace hspmd::kernels
