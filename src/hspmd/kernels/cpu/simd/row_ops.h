// Internal to the CPU backend: the inner loops of the hot kernels (attention's softmax rows, RMSNorm
// rows, SwiGLU and GeGLU, cross-entropy's exponentials and soft-capping, AdamW, bf16 rounding),
// float32 only, as one table per SIMD level.
// row_ops() returns the table of the level in use (kernels/simd.h).
//
//   const cpu::RowOps& ops = cpu::row_ops();
//   float m = ops.row_max(s, n);
//   float l = ops.exp_shift_sum(s, n, m);   // s[i] = exp(s[i] - m), l = their sum
//
// Exponentials use one polynomial (exp(r) to degree 7 after range reduction, within 2 ulp of
// std::exp on [-87, 88]; inputs outside are clamped, so results are never inf or NaN).
#pragma once

#include <cstdint>

#include "hspmd/kernels/simd.h"

namespace hspmd::kernels::cpu {

struct AdamwStep {
  float decay;           // 1 - lr * weight_decay
  float beta1, beta2;
  float step_size;       // lr / (1 - beta1^t)
  float inv_sqrt_bias2;  // 1 / sqrt(1 - beta2^t)
  float eps;
  float grad_scale;      // the gradient is multiplied by this first
};

struct RowOps {
  SimdLevel level;
  float (*row_max)(const float* x, int64_t n);
  // x[i] = exp(x[i] - shift); returns the sum of the new x.
  float (*exp_shift_sum)(float* x, int64_t n, float shift);
  // sum of exp(x[i] - shift), accumulated in double; x is not written.
  double (*exp_shift_sum_f64)(const float* x, int64_t n, float shift);
  // out[i] = scale * exp(x[i] - shift)
  void (*exp_shift_scale)(const float* x, int64_t n, float shift, float scale, float* out);
  // dp[i] = p[i] * (dp[i] - delta)
  void (*softmax_grad_row)(float* dp, const float* p, int64_t n, float delta);
  // y = silu(g) * u; all may alias
  void (*swiglu_fwd)(const float* g, const float* u, float* y, int64_t n);
  // dg = dy * u * silu'(g), du = dy * silu(g); outputs may alias inputs
  void (*swiglu_bwd)(const float* g, const float* u, const float* dy, float* dg, float* du, int64_t n);
  // y = gelu_tanh(g) * u; all may alias
  void (*geglu_tanh_fwd)(const float* g, const float* u, float* y, int64_t n);
  // dg = dy * u * gelu_tanh'(g), du = dy * gelu_tanh(g); outputs may alias inputs
  void (*geglu_tanh_bwd)(const float* g, const float* u, const float* dy, float* dg, float* du, int64_t n);
  // x[i] = cap * tanh(x[i] / cap) (logit soft-capping)
  void (*softcap)(float* x, int64_t n, float cap);
  // r = 1 / sqrt(mean(x^2) + eps) (sum of squares in double), y = x * r * w; returns r
  float (*rms_norm_row)(const float* x, const float* w, int64_t n, double eps, float* y);
  // dx = r * dy * w - x * r^3 * dot(dy * w, x) / n (the dot in double)
  void (*rms_norm_dx_row)(const float* x, const float* w, const float* dy, float r, int64_t n, float* dx);
  // m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p = p decay - step_size m / (sqrt(v) inv_sqrt_bias2 + eps)
  void (*adamw)(float* p, const float* g, float* m, float* v, int64_t n, const AdamwStep& s);
  // The nearest bfloat16 of each x[i] (ties to even, a NaN stays a quiet NaN), as a float (dst may
  // be x) or as its 16 bits (BFloat16's; integer arithmetic, so every level gives the same bits).
  void (*round_to_bfloat16)(const float* x, float* dst, int64_t n);
  void (*to_bfloat16)(const float* x, uint16_t* dst, int64_t n);
};

// One table per level, each defined in its own translation unit built for that instruction set.
extern const RowOps kRowOpsScalar;
extern const RowOps kRowOpsAvx2;
extern const RowOps kRowOpsAvx512;

const RowOps& row_ops();  // of simd_level()

}  // namespace hspmd::kernels::cpu
