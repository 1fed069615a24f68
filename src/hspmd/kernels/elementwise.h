// Elementwise ops on tensors of equal numel (shapes may differ by a reshape). out may alias an input.
// float32, float64, bfloat16 (computed in float32).
//
//   silu(x)        = x * sigmoid(x)
//   gelu_tanh(x)   = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   swiglu(g, u)   = silu(g) * u            (the Llama MLP: down(swiglu(gate(x), up(x))))
//   geglu_tanh(g, u) = gelu_tanh(g) * u     (Gemma's MLP, transformers' gelu_pytorch_tanh)
#pragma once

#include "hspmd/core/tensor.h"

namespace hspmd::kernels {

void add(const Tensor& a, const Tensor& b, const Tensor& out);
void sub(const Tensor& a, const Tensor& b, const Tensor& out);
void mul(const Tensor& a, const Tensor& b, const Tensor& out);
void scale(const Tensor& a, double alpha, const Tensor& out);
// out = a + alpha * b (gradient accumulation: axpy(grad, 1.0, partial, grad)).
void axpy(const Tensor& a, double alpha, const Tensor& b, const Tensor& out);

void silu_fwd(const Tensor& x, const Tensor& y);
void silu_bwd(const Tensor& x, const Tensor& dy, const Tensor& dx);
void gelu_tanh_fwd(const Tensor& x, const Tensor& y);
void gelu_tanh_bwd(const Tensor& x, const Tensor& dy, const Tensor& dx);
void swiglu_fwd(const Tensor& gate, const Tensor& up, const Tensor& y);
void swiglu_bwd(const Tensor& gate, const Tensor& up, const Tensor& dy, const Tensor& dgate, const Tensor& dup);
void geglu_tanh_fwd(const Tensor& gate, const Tensor& up, const Tensor& y);
void geglu_tanh_bwd(const Tensor& gate, const Tensor& up, const Tensor& dy, const Tensor& dgate, const Tensor& dup);

}  // namespace hspmd::kernels
