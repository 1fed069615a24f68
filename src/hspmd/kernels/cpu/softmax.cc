// Softmax over the last dimension: rows are independent, so threads split the rows. Row sums
// accumulate in double for float32 too (vocab-sized rows hold ~10^5 terms).
#include "hspmd/kernels/softmax.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <type_traits>
#include <utility>

#include "hspmd/kernels/cpu/numel_checks.h"
#include "hspmd/kernels/cpu/typed_visit.h"

namespace hspmd::kernels {
namespace {

// Checks x and the other tensors (same numel and dtype) and returns the row length (x's last dim).
int64_t row_length(const char* kernel, const char* x_name, const Tensor& x,
                   std::initializer_list<std::pair<const char*, const Tensor*>> others) {
  cpu::check_floating(kernel, x_name, x);
  for (const auto& [name, t] : others) cpu::check_like(kernel, x_name, x, name, *t);
  HSPMD_CHECK(x.rank() >= 1) << kernel << ": '" << x_name << "' " << x.to_string()
                             << " is a scalar; softmax needs a last dimension";
  return x.dim(-1);
}

}  // namespace

void softmax_fwd(const Tensor& x, const Tensor& y) {
  const int64_t n = row_length("softmax_fwd", "x", x, {{"y", &y}});
  if (x.numel() == 0) return;
  const int64_t rows = x.numel() / n;
  cpu::visit_floating(x, [&](auto* px) {
    using T = std::remove_pointer_t<decltype(px)>;
    T* py = y.data<T>();
#pragma omp parallel for schedule(static) if (x.numel() >= cpu::kParallelThreshold / 8)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = px + r * n;
      T* yr = py + r * n;  // may alias xr: each element is read before it is written
      T max = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < n; ++j) max = std::max(max, xr[j]);
      double total = 0;
      for (int64_t j = 0; j < n; ++j) {
        T e = std::exp(xr[j] - max);
        yr[j] = e;
        total += e;
      }
      const T inv = static_cast<T>(1.0 / total);
      for (int64_t j = 0; j < n; ++j) yr[j] *= inv;
    }
  });
}

void softmax_bwd(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  const int64_t n = row_length("softmax_bwd", "y", y, {{"dy", &dy}, {"dx", &dx}});
  if (y.numel() == 0) return;
  const int64_t rows = y.numel() / n;
  cpu::visit_floating(y, [&](auto* py) {
    using T = std::remove_pointer_t<decltype(py)>;
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
#pragma omp parallel for schedule(static) if (y.numel() >= cpu::kParallelThreshold)
    for (int64_t r = 0; r < rows; ++r) {
      const T* yr = py + r * n;
      const T* dyr = pdy + r * n;
      T* dxr = pdx + r * n;  // may alias dyr
      double dot = 0;
      for (int64_t j = 0; j < n; ++j) dot += static_cast<double>(dyr[j]) * static_cast<double>(yr[j]);
      const T d = static_cast<T>(dot);
      for (int64_t j = 0; j < n; ++j) dxr[j] = yr[j] * (dyr[j] - d);
    }
  });
}

}  // namespace hspmd::kernels
