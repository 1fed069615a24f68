// AdamW, one fused pass over (param, grad, m, v). The per-step scalars (bias corrections) are computed
// once in double; the per-element math runs in the tensors' dtype, as PyTorch's for-each AdamW does.
#include "hspmd/kernels/adamw.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "hspmd/kernels/cpu/numel_checks.h"
#include "hspmd/kernels/cpu/simd/row_ops.h"
#include "hspmd/kernels/cpu/typed_visit.h"

namespace hspmd::kernels {

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, int64_t step,
                const AdamWOptions& options) {
  const char* kernel = "adamw_step";
  cpu::check_floating(kernel, "param", param);
  cpu::check_like(kernel, "param", param, "grad", grad);
  cpu::check_like(kernel, "param", param, "m", m);
  cpu::check_like(kernel, "param", param, "v", v);
  HSPMD_CHECK(step >= 1) << kernel << ": step counts from 1, got " << step;
  HSPMD_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1)
      << kernel << ": betas must lie in [0, 1), got beta1 " << options.beta1 << ", beta2 " << options.beta2;
  HSPMD_CHECK(options.lr >= 0 && options.eps > 0 && options.weight_decay >= 0)
      << kernel << ": need lr >= 0, eps > 0, weight_decay >= 0; got lr " << options.lr << ", eps " << options.eps
      << ", weight_decay " << options.weight_decay;
  HSPMD_CHECK(std::isfinite(options.grad_scale)) << kernel << ": grad_scale must be finite, got " << options.grad_scale;

  const double s = static_cast<double>(step);
  const double bias1 = 1 - std::pow(options.beta1, s);
  const double bias2 = 1 - std::pow(options.beta2, s);
  cpu::visit_floating(param, [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    const T* g = grad.data<T>();
    T* pm = m.data<T>();
    T* pv = v.data<T>();
    const T decay = static_cast<T>(1 - options.lr * options.weight_decay);
    const T b1 = static_cast<T>(options.beta1), b2 = static_cast<T>(options.beta2);
    const T step_size = static_cast<T>(options.lr / bias1);
    // sqrt(v / bias2) = sqrt(v) / sqrt(bias2): one multiply per element instead of a divide.
    const T inv_sqrt_bias2 = static_cast<T>(1 / std::sqrt(bias2));
    const T eps = static_cast<T>(options.eps);
    const T grad_scale = static_cast<T>(options.grad_scale);
    const int64_t n = param.numel();
    if constexpr (std::is_same_v<T, float>) {
      // The SIMD loop over chunks (of whole cache lines) that the threads share.
      const cpu::AdamwStep coefficients{.decay = decay,
                                        .beta1 = b1,
                                        .beta2 = b2,
                                        .step_size = step_size,
                                        .inv_sqrt_bias2 = inv_sqrt_bias2,
                                        .eps = eps,
                                        .grad_scale = grad_scale};
      const cpu::RowOps& ops = cpu::row_ops();
      constexpr int64_t kChunk = 4096;
      const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= cpu::kParallelThreshold)
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t i = c * kChunk, len = std::min(kChunk, n - i);
        ops.adamw(p + i, g + i, pm + i, pv + i, len, coefficients);
      }
      return;
    }
#pragma omp parallel for schedule(static) if (n >= cpu::kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) {
      const T gi = g[i] * grad_scale;
      const T mi = b1 * pm[i] + (1 - b1) * gi;
      const T vi = b2 * pv[i] + (1 - b2) * gi * gi;
      pm[i] = mi;
      pv[i] = vi;
      p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bias2 + eps);
    }
  });
}

}  // namespace hspmd::kernels
