#include "hspmd/kernels/cpu/vec_math.h"

#include <cmath>
#include <cstring>

// Compile the float loops twice (AVX2+FMA and baseline) and dispatch once at load time.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define HSPMD_VEC_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define HSPMD_VEC_CLONES
#endif

namespace hspmd::kernels::cpu {
namespace {

// 8 floats as one GCC vector: the AVX2 clone keeps it in one register, the baseline one in two. The
// explicit vector type is needed because GCC turns the scalar form's clamps into branches (each
// clamp yields a constant) and then refuses to vectorize the loop.
// The helpers taking Floats are always inlined, so the psabi note (32-byte vectors change the
// calling convention without AVX) never applies.
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float Floats __attribute__((vector_size(32)));
typedef int32_t Ints __attribute__((vector_size(32)));
constexpr int kLanes = 8;

[[gnu::always_inline]] inline Floats splat(float v) { return Floats{} + v; }

// exp(x) = 2^n * exp(r) with n = round(x / ln 2) and |r| <= ln(2) / 2; exp(r) by its Taylor series
// to degree 7 (truncation error r^8/8! < 1.5e-9 relative). Rounding uses the 1.5 * 2^23 trick
// (adding it leaves n in the low mantissa bits), and 2^n is built directly in the exponent field.
// x is clamped to [-87, 88] so 2^n stays a normal float.
[[gnu::always_inline]] inline Floats exp_poly(const Floats& in) {
  Floats x = in;
  x = x < splat(-87.0f) ? splat(-87.0f) : x;
  x = x > splat(88.0f) ? splat(88.0f) : x;
  const float kRound = 12582912.0f;  // 1.5 * 2^23
  Floats t = x * 1.44269504088896341f + kRound;
  Floats n = t - kRound;
  Ints ni = reinterpret_cast<Ints>(t) - __builtin_bit_cast(int32_t, kRound);
  // ln 2 split in two so that n * kLn2Hi is exact (kLn2Hi has 9 significant bits).
  const float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  Floats r = x - n * kLn2Hi - n * kLn2Lo;
  Floats p = splat(1.0f / 5040);
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p * reinterpret_cast<Floats>((ni + 127) << 23);
}

}  // namespace

float exp_approx(float x) {
  Floats v = splat(x);
  return exp_poly(v)[0];
}

HSPMD_VEC_CLONES float row_max(const float* x, int64_t n) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

double row_max(const double* x, int64_t n) {
  double m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

HSPMD_VEC_CLONES float exp_shift_sum(float* x, int64_t n, float shift) {
  Floats sum{};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Floats v;
    __builtin_memcpy(&v, x + i, sizeof v);
    v -= shift;
    v = exp_poly(v);
    __builtin_memcpy(x + i, &v, sizeof v);
    sum += v;
  }
  if (i < n) {  // the tail: padded lanes are zeroed before they reach the sum
    Floats v = splat(0.0f);
    __builtin_memcpy(&v, x + i, sizeof(float) * (n - i));
    v -= shift;
    v = exp_poly(v);
    for (int64_t lane = n - i; lane < kLanes; ++lane) v[lane] = 0.0f;
    __builtin_memcpy(x + i, &v, sizeof(float) * (n - i));
    sum += v;
  }
  float total = 0;
  for (int lane = 0; lane < kLanes; ++lane) total += sum[lane];
  return total;
}

double exp_shift_sum(double* x, int64_t n, double shift) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    s += x[i];
  }
  return s;
}

HSPMD_VEC_CLONES void softmax_grad_row(float* dp, const float* p, int64_t n, float delta) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dp[i] = p[i] * (dp[i] - delta);
}

void softmax_grad_row(double* dp, const double* p, int64_t n, double delta) {
  for (int64_t i = 0; i < n; ++i) dp[i] = p[i] * (dp[i] - delta);
}

}  // namespace hspmd::kernels::cpu
