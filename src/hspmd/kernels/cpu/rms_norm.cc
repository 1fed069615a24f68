// RMSNorm on the CPU (spec in kernels/rms_norm.h). Rows are independent and run in parallel; the
// sum of squares is accumulated in double. dweight, a sum over rows, is computed column block by
// column block with the rows added in order, so it is bitwise the same for every thread count.
// A weight offset (Gemma's 1 + weight) is added to a copy of the weight once per call; dweight does
// not read the weight, so only y and dx see it.
#include "hspmd/kernels/rms_norm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "hspmd/kernels/cpu/simd/row_ops.h"
#include "hspmd/kernels/cpu/typed_visit.h"

namespace hspmd::kernels {
namespace {

using cpu::kParallelThreshold;

struct RowsShape {
  int64_t rows;    // T: every dim of x but the last
  int64_t hidden;  // H: the last dim of x
};

RowsShape check_x_weight(const char* kernel, const Tensor& x, const Tensor& weight) {
  cpu::check_floating(kernel, "x", x);
  HSPMD_CHECK(x.rank() >= 1 && x.dim(-1) > 0) << kernel << ": x " << x.to_string() << " needs a non-empty last dim";
  const int64_t hidden = x.dim(-1);
  cpu::check_same_dtype(kernel, "x", x, "weight", weight);
  HSPMD_CHECK(weight.shape() == Shape({hidden}))
      << kernel << ": weight " << weight.to_string() << " must be [" << hidden << "] for x " << x.to_string();
  return {x.numel() / hidden, hidden};
}

void check_like_x(const char* kernel, const Tensor& x, const char* name, const Tensor& t) {
  cpu::check_same_dtype(kernel, "x", x, name, t);
  HSPMD_CHECK(t.shape() == x.shape()) << kernel << ": " << name << " " << t.to_string() << " must be shaped like x "
                                      << x.to_string();
}

void check_rstd(const char* kernel, const Tensor& x, const Tensor& rstd, int64_t rows) {
  cpu::check_same_dtype(kernel, "x", x, "rstd", rstd);
  HSPMD_CHECK(rstd.numel() == rows) << kernel << ": rstd " << rstd.to_string() << " must hold one value per row of x "
                                    << x.to_string() << " (" << rows << ")";
}

template <typename T>
void fwd_rows(const T* x, const T* w, double eps, T* y, T* rstd, RowsShape s) {
#pragma omp parallel for schedule(static) if (s.rows * s.hidden >= kParallelThreshold)
  for (int64_t t = 0; t < s.rows; ++t) {
    const T* xr = x + t * s.hidden;
    if constexpr (std::is_same_v<T, float>) {  // the SIMD row loop, same arithmetic
      rstd[t] = cpu::row_ops().rms_norm_row(xr, w, s.hidden, eps, y + t * s.hidden);
      continue;
    }
    double sumsq = 0;
    for (int64_t i = 0; i < s.hidden; ++i) sumsq += static_cast<double>(xr[i]) * xr[i];
    // The backward uses the saved (rounded) rstd, so y is computed from the same value.
    const T r = static_cast<T>(1.0 / std::sqrt(sumsq / static_cast<double>(s.hidden) + eps));
    rstd[t] = r;
    T* yr = y + t * s.hidden;
    for (int64_t i = 0; i < s.hidden; ++i) yr[i] = xr[i] * r * w[i];
  }
}

// dweight[i] = sum_t dy[t, i] * x[t, i] * rstd[t], by blocks of columns; within a block rows are
// added in order, so the result does not depend on the thread count.
template <typename T>
void dweight_columns(const T* x, const T* rstd, const T* dy, T* dw, RowsShape s) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (s.hidden + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (s.rows * s.hidden >= kParallelThreshold)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock, end = std::min(s.hidden, begin + kBlock);
    double acc[kBlock] = {};
    for (int64_t t = 0; t < s.rows; ++t) {
      const double r = rstd[t];
      const T* xr = x + t * s.hidden;
      const T* dyr = dy + t * s.hidden;
      for (int64_t i = begin; i < end; ++i) acc[i - begin] += static_cast<double>(dyr[i]) * xr[i] * r;
    }
    for (int64_t i = begin; i < end; ++i) dw[i] = static_cast<T>(acc[i - begin]);
  }
}

// With r = rstd[t] and g = dy * w:  dx = r * g - x * r^3 * dot(g, x) / H.
template <typename T>
void dx_rows(const T* x, const T* w, const T* rstd, const T* dy, T* dx, RowsShape s) {
#pragma omp parallel for schedule(static) if (s.rows * s.hidden >= kParallelThreshold)
  for (int64_t t = 0; t < s.rows; ++t) {
    const T* xr = x + t * s.hidden;
    const T* dyr = dy + t * s.hidden;
    T* dxr = dx + t * s.hidden;
    if constexpr (std::is_same_v<T, float>) {  // the SIMD row loop: the dot in double, the rest in float
      cpu::row_ops().rms_norm_dx_row(xr, w, dyr, rstd[t], s.hidden, dxr);
      continue;
    }
    const double r = rstd[t];
    double g_dot_x = 0;
    for (int64_t i = 0; i < s.hidden; ++i) g_dot_x += static_cast<double>(dyr[i]) * w[i] * xr[i];
    const double c = r * r * r * g_dot_x / static_cast<double>(s.hidden);
    for (int64_t i = 0; i < s.hidden; ++i) {
      dxr[i] = static_cast<T>(r * static_cast<double>(dyr[i]) * w[i] - c * xr[i]);
    }
  }
}

// weight_offset + weight: the weight itself when the offset is 0, else a copy held in `storage`.
template <typename T>
const T* offset_weight(const Tensor& weight, double weight_offset, std::vector<T>& storage) {
  const T* w = weight.data<T>();
  if (weight_offset == 0.0) return w;
  storage.resize(static_cast<size_t>(weight.numel()));
  for (size_t i = 0; i < storage.size(); ++i) storage[i] = static_cast<T>(weight_offset + static_cast<double>(w[i]));
  return storage.data();
}

}  // namespace

void rms_norm_fwd(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd,
                  double weight_offset) {
  const char* kernel = "rms_norm_fwd";
  const RowsShape s = check_x_weight(kernel, x, weight);
  HSPMD_CHECK(eps >= 0) << kernel << ": eps " << eps << " must be >= 0";
  check_like_x(kernel, x, "y", y);
  check_rstd(kernel, x, rstd, s.rows);
  cpu::visit_floating(x, [&](auto* px) {
    using T = std::remove_pointer_t<decltype(px)>;
    std::vector<T> storage;
    fwd_rows<T>(px, offset_weight<T>(weight, weight_offset, storage), eps, y.data<T>(), rstd.data<T>(), s);
  });
}

void rms_norm_bwd(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                  const Tensor& dweight, double weight_offset) {
  const char* kernel = "rms_norm_bwd";
  const RowsShape s = check_x_weight(kernel, x, weight);
  check_rstd(kernel, x, rstd, s.rows);
  check_like_x(kernel, x, "dy", dy);
  check_like_x(kernel, x, "dx", dx);
  cpu::check_same_dtype(kernel, "weight", weight, "dweight", dweight);
  HSPMD_CHECK(dweight.shape() == weight.shape())
      << kernel << ": dweight " << dweight.to_string() << " must be shaped like weight " << weight.to_string();
  cpu::visit_floating(x, [&](auto* px) {
    using T = std::remove_pointer_t<decltype(px)>;
    // dweight first: it reads dy and x, which dx may overwrite when the caller computes in place.
    dweight_columns<T>(px, rstd.data<T>(), dy.data<T>(), dweight.data<T>(), s);
    std::vector<T> storage;
    dx_rows<T>(px, offset_weight<T>(weight, weight_offset, storage), rstd.data<T>(), dy.data<T>(), dx.data<T>(), s);
  });
}

}  // namespace hspmd::kernels
