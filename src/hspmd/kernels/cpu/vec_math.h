// Internal to the CPU backend: vectorized row primitives of a softmax, for the attention tiles.
//
//   float s[64] = ...;                       // one row of scaled scores
//   float m = row_max(s, 64);
//   float l = exp_shift_sum(s, 64, m);       // s[i] = exp(s[i] - m), l = sum of them
//
// The float versions run the row loops of the SIMD level in use (cpu/simd/row_ops.h; exp_approx is
// their polynomial exp, within 2 ulp of std::exp). The double versions use std::exp (they are the
// accurate oracle).
#pragma once

#include <cstdint>

namespace hspmd::kernels::cpu {

float exp_approx(float x);  // for x in [-87, 88]; smaller x gives ~1e-38, never inf or NaN

float row_max(const float* x, int64_t n);
double row_max(const double* x, int64_t n);

// x[i] = exp(x[i] - shift) for i < n; returns the sum of the new x.
float exp_shift_sum(float* x, int64_t n, float shift);
double exp_shift_sum(double* x, int64_t n, double shift);

// dp[i] = p[i] * (dp[i] - delta): the softmax backward dS = P * (dP - rowsum(dO * O)).
void softmax_grad_row(float* dp, const float* p, int64_t n, float delta);
void softmax_grad_row(double* dp, const double* p, int64_t n, double delta);

}  // namespace hspmd::kernels::cpu
