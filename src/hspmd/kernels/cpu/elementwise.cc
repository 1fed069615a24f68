// Elementwise kernels: one templated loop per arity; the op is a lambda inlined into it, so the
// compiler vectorizes the simple ones. bfloat16 elements are widened to float32, computed, and rounded
// back (round to nearest even) on store; float64 computes in double.
#include "hspmd/kernels/elementwise.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "hspmd/kernels/cpu/numel_checks.h"
#include "hspmd/kernels/cpu/simd/row_ops.h"
#include "hspmd/kernels/cpu/typed_visit.h"

namespace hspmd::kernels {
namespace {

using cpu::check_defined;
using cpu::check_like;

// Arithmetic type for an element type: float for float32 and bfloat16, double for float64.
template <typename T>
using Compute = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Transcendental ops (exp, tanh) cost ~10x an add, so they pay for threads at fewer elements.
constexpr int64_t kCheapGrain = cpu::kParallelThreshold;
constexpr int64_t kCostlyGrain = cpu::kParallelThreshold / 8;

// Calls f(T*) with T = float, double or BFloat16, the element type of t.
template <typename F>
void visit_elementwise(const char* kernel, const char* name, const Tensor& t, F&& f) {
  check_defined(kernel, name, t);
  switch (t.dtype()) {
    case DType::kFloat32: f(t.data<float>()); return;
    case DType::kFloat64: f(t.data<double>()); return;
    case DType::kBFloat16: f(t.data<BFloat16>()); return;
    default: break;
  }
  HSPMD_THROW() << kernel << ": '" << name << "' is " << t.to_string()
                << ", expected float32, float64 or bfloat16";
}

template <typename T, typename F>
void map_unary(const T* x, T* y, int64_t n, int64_t grain, F f) {
#pragma omp parallel for schedule(static) if (n >= grain)
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(f(static_cast<Compute<T>>(x[i])));
}

template <typename T, typename F>
void map_binary(const T* a, const T* b, T* y, int64_t n, int64_t grain, F f) {
#pragma omp parallel for schedule(static) if (n >= grain)
  for (int64_t i = 0; i < n; ++i) {
    y[i] = static_cast<T>(f(static_cast<Compute<T>>(a[i]), static_cast<Compute<T>>(b[i])));
  }
}

template <typename T, typename F>
void map_ternary(const T* a, const T* b, const T* c, T* y, int64_t n, int64_t grain, F f) {
#pragma omp parallel for schedule(static) if (n >= grain)
  for (int64_t i = 0; i < n; ++i) {
    y[i] = static_cast<T>(
        f(static_cast<Compute<T>>(a[i]), static_cast<Compute<T>>(b[i]), static_cast<Compute<T>>(c[i])));
  }
}

// y = f(x) after checking that x and y agree in numel and dtype.
template <typename F>
void unary(const char* kernel, const char* x_name, const Tensor& x, const char* y_name, const Tensor& y,
           int64_t grain, F f) {
  check_like(kernel, x_name, x, y_name, y);
  visit_elementwise(kernel, x_name, x, [&](auto* px) {
    using T = std::remove_pointer_t<decltype(px)>;
    map_unary<T>(px, y.data<T>(), x.numel(), grain, f);
  });
}

template <typename F>
void binary(const char* kernel, const char* a_name, const Tensor& a, const char* b_name, const Tensor& b,
            const char* y_name, const Tensor& y, int64_t grain, F f) {
  check_like(kernel, a_name, a, b_name, b);
  check_like(kernel, a_name, a, y_name, y);
  visit_elementwise(kernel, a_name, a, [&](auto* pa) {
    using T = std::remove_pointer_t<decltype(pa)>;
    map_binary<T>(pa, b.data<T>(), y.data<T>(), a.numel(), grain, f);
  });
}

template <typename V>
V sigmoid(V x) {
  return V(1) / (V(1) + std::exp(-x));
}

// d silu / dx = s + x s (1 - s) with s = sigmoid(x).
template <typename V>
V silu_grad(V x) {
  V s = sigmoid(x);
  return s * (V(1) + x * (V(1) - s));
}

constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCoef = 0.044715;

template <typename V>
V gelu_tanh(V v) {
  V u = V(kSqrt2OverPi) * (v + V(kGeluCoef) * v * v * v);
  return V(0.5) * v * (V(1) + std::tanh(u));
}

// d/dx [x/2 (1 + tanh u)] = (1 + t)/2 + x/2 (1 - t^2) du/dx,  du/dx = c (1 + 3 k x^2).
template <typename V>
V gelu_tanh_grad(V v) {
  V c = V(kSqrt2OverPi), k = V(kGeluCoef);
  V t = std::tanh(c * (v + k * v * v * v));
  V du = c * (V(1) + V(3) * k * v * v);
  return V(0.5) * (V(1) + t) + V(0.5) * v * (V(1) - t * t) * du;
}

}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  binary("add", "a", a, "b", b, "out", out, kCheapGrain, [](auto x, auto y) { return x + y; });
}

void sub(const Tensor& a, const Tensor& b, const Tensor& out) {
  binary("sub", "a", a, "b", b, "out", out, kCheapGrain, [](auto x, auto y) { return x - y; });
}

void mul(const Tensor& a, const Tensor& b, const Tensor& out) {
  binary("mul", "a", a, "b", b, "out", out, kCheapGrain, [](auto x, auto y) { return x * y; });
}

void scale(const Tensor& a, double alpha, const Tensor& out) {
  unary("scale", "a", a, "out", out, kCheapGrain, [alpha](auto x) { return x * static_cast<decltype(x)>(alpha); });
}

void axpy(const Tensor& a, double alpha, const Tensor& b, const Tensor& out) {
  binary("axpy", "a", a, "b", b, "out", out, kCheapGrain,
         [alpha](auto x, auto y) { return x + static_cast<decltype(x)>(alpha) * y; });
}

void silu_fwd(const Tensor& x, const Tensor& y) {
  unary("silu_fwd", "x", x, "y", y, kCostlyGrain, [](auto v) { return v * sigmoid(v); });
}

void silu_bwd(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  binary("silu_bwd", "x", x, "dy", dy, "dx", dx, kCostlyGrain, [](auto v, auto g) { return g * silu_grad(v); });
}

void gelu_tanh_fwd(const Tensor& x, const Tensor& y) {
  unary("gelu_tanh_fwd", "x", x, "y", y, kCostlyGrain, [](auto v) { return gelu_tanh(v); });
}

void gelu_tanh_bwd(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  binary("gelu_tanh_bwd", "x", x, "dy", dy, "dx", dx, kCostlyGrain,
         [](auto v, auto g) { return g * gelu_tanh_grad(v); });
}

namespace {

// float32 runs the SIMD loops (cpu/simd/row_ops.h) over chunks that the threads share.
constexpr int64_t kSimdChunk = 4096;

using GatedFwdRow = void (*)(const float* g, const float* u, float* y, int64_t n);
using GatedBwdRow = void (*)(const float* g, const float* u, const float* dy, float* dg, float* du, int64_t n);

// A gated activation y = act(gate) up: float32 through the SIMD row op `row`, the other dtypes
// through `scalar(g, u)`.
template <typename F>
void gated_fwd(const char* kernel, GatedFwdRow row, const Tensor& gate, const Tensor& up, const Tensor& y,
               F scalar) {
  check_like(kernel, "gate", gate, "up", up);
  check_like(kernel, "gate", gate, "y", y);
  if (gate.dtype() == DType::kFloat32) {
    const float *g = gate.data<float>(), *u = up.data<float>();
    float* out = y.data<float>();
    const int64_t n = gate.numel(), chunks = (n + kSimdChunk - 1) / kSimdChunk;
#pragma omp parallel for schedule(static) if (n >= kCostlyGrain)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t i = c * kSimdChunk;
      row(g + i, u + i, out + i, std::min(kSimdChunk, n - i));
    }
    return;
  }
  binary(kernel, "gate", gate, "up", up, "y", y, kCostlyGrain, scalar);
}

// Its backward, dgate = dy u act'(g) and dup = dy act(g): float32 through `row`, the others through
// `scalar(g, u, dy, dgate&, dup&)`. Every input element is read before either output element is
// written, so the outputs may alias the inputs.
template <typename F>
void gated_bwd(const char* kernel, GatedBwdRow row, const Tensor& gate, const Tensor& up, const Tensor& dy,
               const Tensor& dgate, const Tensor& dup, F scalar) {
  check_like(kernel, "gate", gate, "up", up);
  check_like(kernel, "gate", gate, "dy", dy);
  check_like(kernel, "gate", gate, "dgate", dgate);
  check_like(kernel, "gate", gate, "dup", dup);
  visit_elementwise(kernel, "gate", gate, [&](auto* pg) {
    using T = std::remove_pointer_t<decltype(pg)>;
    using V = Compute<T>;
    const T* pu = up.data<T>();
    const T* pd = dy.data<T>();
    T* pdg = dgate.data<T>();
    T* pdu = dup.data<T>();
    const int64_t n = gate.numel();
    if constexpr (std::is_same_v<T, float>) {
      const int64_t chunks = (n + kSimdChunk - 1) / kSimdChunk;
#pragma omp parallel for schedule(static) if (n >= kCostlyGrain)
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t i = c * kSimdChunk;
        row(pg + i, pu + i, pd + i, pdg + i, pdu + i, std::min(kSimdChunk, n - i));
      }
      return;
    }
#pragma omp parallel for schedule(static) if (n >= kCostlyGrain)
    for (int64_t i = 0; i < n; ++i) {
      V dg, du;
      scalar(static_cast<V>(pg[i]), static_cast<V>(pu[i]), static_cast<V>(pd[i]), dg, du);
      pdg[i] = static_cast<T>(dg);
      pdu[i] = static_cast<T>(du);
    }
  });
}

}  // namespace

void swiglu_fwd(const Tensor& gate, const Tensor& up, const Tensor& y) {
  gated_fwd("swiglu_fwd", cpu::row_ops().swiglu_fwd, gate, up, y,
            [](auto g, auto u) { return g * sigmoid(g) * u; });
}

// y = silu(g) u:  dgate = dy u silu'(g),  dup = dy silu(g).
void swiglu_bwd(const Tensor& gate, const Tensor& up, const Tensor& dy, const Tensor& dgate, const Tensor& dup) {
  gated_bwd("swiglu_bwd", cpu::row_ops().swiglu_bwd, gate, up, dy, dgate, dup,
            [](auto g, auto u, auto d, auto& dg, auto& du) {
              using V = decltype(g);
              const V s = sigmoid(g);
              dg = d * u * s * (V(1) + g * (V(1) - s));
              du = d * g * s;
            });
}

// float32 computes gelu_tanh as x sigmoid(2u) (cpu/simd/row_ops.inc); the others the tanh form above.
void geglu_tanh_fwd(const Tensor& gate, const Tensor& up, const Tensor& y) {
  gated_fwd("geglu_tanh_fwd", cpu::row_ops().geglu_tanh_fwd, gate, up, y,
            [](auto g, auto u) { return gelu_tanh(g) * u; });
}

// y = gelu_tanh(g) u:  dgate = dy u gelu_tanh'(g),  dup = dy gelu_tanh(g).
void geglu_tanh_bwd(const Tensor& gate, const Tensor& up, const Tensor& dy, const Tensor& dgate,
                    const Tensor& dup) {
  gated_bwd("geglu_tanh_bwd", cpu::row_ops().geglu_tanh_bwd, gate, up, dy, dgate, dup,
            [](auto g, auto u, auto d, auto& dg, auto& du) {
              dg = d * u * gelu_tanh_grad(g);
              du = d * gelu_tanh(g);
            });
}

}  // namespace hspmd::kernels
