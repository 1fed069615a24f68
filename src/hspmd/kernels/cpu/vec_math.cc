#include "hspmd/kernels/cpu/vec_math.h"

#include <cmath>

#include "hspmd/kernels/cpu/simd/row_ops.h"

// The float versions are the row loops of the SIMD level in use (cpu/simd/row_ops.h).
namespace hspmd::kernels::cpu {

float exp_approx(float x) {
  float y = 0;
  row_ops().exp_shift_scale(&x, 1, 0.0f, 1.0f, &y);
  return y;
}

float row_max(const float* x, int64_t n) { return row_ops().row_max(x, n); }

double row_max(const double* x, int64_t n) {
  double m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

float exp_shift_sum(float* x, int64_t n, float shift) { return row_ops().exp_shift_sum(x, n, shift); }

double exp_shift_sum(double* x, int64_t n, double shift) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    s += x[i];
  }
  return s;
}

void softmax_grad_row(float* dp, const float* p, int64_t n, float delta) {
  row_ops().softmax_grad_row(dp, p, n, delta);
}

void softmax_grad_row(double* dp, const double* p, int64_t n, double delta) {
  for (int64_t i = 0; i < n; ++i) dp[i] = p[i] * (dp[i] - delta);
}

}  // namespace hspmd::kernels::cpu
