// Dtype conversion: one templated loop per (source, destination) pair, chosen by a double dispatch.
// Conversions that can lose range (floating to integer, int64 to int32) validate every element first,
// so a value that does not fit raises an Error naming it instead of undefined behaviour.
#include "hspmd/kernels/cast.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "hspmd/kernels/cpu/numel_checks.h"
#include "hspmd/kernels/cpu/typed_visit.h"

namespace hspmd::kernels {
namespace {

template <typename T>
constexpr bool kIsInteger = std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>;

// Calls f(T*) with T the element type of t (any dtype).
template <typename F>
void visit_any(const Tensor& t, F&& f) {
  switch (t.dtype()) {
    case DType::kFloat32: f(t.data<float>()); return;
    case DType::kFloat64: f(t.data<double>()); return;
    case DType::kBFloat16: f(t.data<BFloat16>()); return;
    case DType::kInt32: f(t.data<int32_t>()); return;
    case DType::kInt64: f(t.data<int64_t>()); return;
  }
  HSPMD_THROW() << "cast: unknown dtype of " << t.to_string();
}

// Rounds a double to bfloat16 once, to nearest even. Going through a plain float cast would round
// twice and break ties wrongly (1 + 2^-8 + 2^-30 must round up to 1 + 2^-7, but becomes the tie
// 1 + 2^-8 in float and then rounds to even, 1). Instead the float is rounded to odd: truncated toward
// zero, with the last bit set when anything was cut off. That sticky bit lies 16 bits below bfloat16's
// last bit, so the final rounding sees exactly whether the value was below, at, or above a tie.
BFloat16 bfloat16_from_double(double v) {
  float f = static_cast<float>(v);
  if (std::isnan(f)) return BFloat16(f);
  if (std::abs(static_cast<double>(f)) > std::abs(v)) f = std::nextafter(f, 0.0f);
  if (static_cast<double>(f) != v) f = std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
  return BFloat16(f);
}

template <typename D, typename S>
D convert(S v) {
  if constexpr (std::is_same_v<S, BFloat16>) {
    return convert<D>(static_cast<float>(v));  // widening bfloat16 to float is exact
  } else if constexpr (std::is_same_v<D, BFloat16>) {
    if constexpr (std::is_same_v<S, float>) {
      return BFloat16(v);
    } else {
      // int32 -> double is exact; int64 beyond 2^53 already rounds in the double.
      return bfloat16_from_double(static_cast<double>(v));
    }
  } else {
    return static_cast<D>(v);  // floating to integer truncates toward zero (range checked before)
  }
}

// Conversions where a source value may not fit the destination.
template <typename D, typename S>
constexpr bool kMayOverflow =
    (kIsInteger<D> && !kIsInteger<S>) || (std::is_same_v<D, int32_t> && std::is_same_v<S, int64_t>);

// Whether v converts to the integer type D without overflow (NaN never fits).
template <typename D, typename S>
bool fits(S v) {
  if constexpr (kIsInteger<S>) {
    return v >= std::numeric_limits<D>::min() && v <= std::numeric_limits<D>::max();
  } else {
    double t = std::trunc(convert<double>(v));
    constexpr double lo = static_cast<double>(std::numeric_limits<D>::min());  // -2^31 or -2^63: exact
    return t >= lo && t < -lo;
  }
}

template <typename D, typename S>
void cast_typed(const S* x, D* y, int64_t n, const Tensor& x_tensor, const Tensor& y_tensor) {
  if constexpr (kMayOverflow<D, S>) {
    int64_t first_bad = n;
#pragma omp parallel for schedule(static) reduction(min : first_bad) if (n >= cpu::kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) {
      if (!fits<D>(x[i])) first_bad = std::min(first_bad, i);
    }
    HSPMD_CHECK(first_bad == n) << "cast: element " << first_bad << " of 'x' " << x_tensor.to_string() << " ("
                                << x_tensor.element_as_double(first_bad) << ") does not fit in "
                                << dtype_name(y_tensor.dtype());
  }
#pragma omp parallel for schedule(static) if (n >= cpu::kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) y[i] = convert<D>(x[i]);
}

}  // namespace

void cast(const Tensor& x, const Tensor& out) {
  cpu::check_same_numel("cast", "x", x, "out", out);
  if (x.dtype() == out.dtype()) {
    if (out.nbytes() > 0) std::memmove(out.raw_data(), x.raw_data(), out.nbytes());
    return;
  }
  visit_any(x, [&](auto* px) {
    visit_any(out, [&](auto* py) { cast_typed(px, py, x.numel(), x, out); });
  });
}

}  // namespace hspmd::kernels
