#include "hspmd/kernels/cuda/elementwise.h"

#include "hspmd/kernels/cuda/device_math.cuh"

namespace hspmd::kernels::cuda {

namespace {

using device::from_float;
using device::to_float;

constexpr int kThreads = 256;

#define HSPMD_GRID_STRIDE(i, n)                                                              \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <typename T>
__global__ void swiglu_fwd_elements(const T* gate, const T* up, T* y, int64_t n) {
  HSPMD_GRID_STRIDE(i, n) {
    const float g = to_float(gate[i]);
    y[i] = from_float<T>(g * device::sigmoid(g) * to_float(up[i]));
  }
}

template <typename T>
__global__ void swiglu_bwd_elements(const T* gate, const T* up, const T* dy, T* dgate, T* dup, int64_t n) {
  HSPMD_GRID_STRIDE(i, n) {
    const float g = to_float(gate[i]), u = to_float(up[i]), d = to_float(dy[i]);
    const float s = device::sigmoid(g);
    dgate[i] = from_float<T>(d * u * s * (1.0f + g * (1.0f - s)));
    dup[i] = from_float<T>(d * g * s);
  }
}

template <typename T>
__global__ void bias_add_elements(const T* x, const T* bias, T* y, int64_t n, int64_t cols) {
  HSPMD_GRID_STRIDE(i, n) { y[i] = from_float<T>(to_float(x[i]) + to_float(bias[i % cols])); }
}

// Casts convert through double (exact for every source), then round once to the destination:
// float64 -> bfloat16 with __double2bfloat16, not through float, whose double rounding would break
// ties wrongly (the CPU kernel's bfloat16_from_double rounds once too).
__device__ __forceinline__ double as_double(float x) { return x; }
__device__ __forceinline__ double as_double(double x) { return x; }
__device__ __forceinline__ double as_double(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename To>
__device__ __forceinline__ To from_double(double x);
template <>
__device__ __forceinline__ float from_double<float>(double x) {
  return static_cast<float>(x);
}
template <>
__device__ __forceinline__ double from_double<double>(double x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_double<__nv_bfloat16>(double x) {
  return __double2bfloat16(x);
}

template <typename From, typename To>
__global__ void cast_elements(const From* x, To* y, int64_t n) {
  HSPMD_GRID_STRIDE(i, n) { y[i] = from_double<To>(as_double(x[i])); }
}

__global__ void round_to_bfloat16_elements(const float* x, float* y, int64_t n) {
  HSPMD_GRID_STRIDE(i, n) { y[i] = __bfloat162float(__float2bfloat16_rn(x[i])); }
}

#undef HSPMD_GRID_STRIDE

// Calls f with a null pointer of float, double or __nv_bfloat16 for `dtype`.
template <typename F>
void visit_floating(DType dtype, const char* kernel, const char* tensor, F&& f) {
  if (dtype == DType::kFloat64) {
    f(static_cast<double*>(nullptr));
    return;
  }
  visit_float_or_bf16(dtype, kernel, tensor, f);
}

void check_count(const char* kernel, int64_t n) { HSPMD_CHECK(n >= 0) << kernel << ": negative element count " << n; }

}  // namespace

void swiglu_fwd(DType dtype, const void* gate, const void* up, void* y, int64_t n, cudaStream_t stream) {
  const char* kernel = "cuda swiglu_fwd";
  check_count(kernel, n);
  if (n == 0) return;
  visit_float_or_bf16(dtype, kernel, "gate", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    swiglu_fwd_elements<T><<<device::grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(y), n);
  });
  check_launch(kernel);
}

void swiglu_bwd(DType dtype, const void* gate, const void* up, const void* dy, void* dgate, void* dup, int64_t n,
                cudaStream_t stream) {
  const char* kernel = "cuda swiglu_bwd";
  check_count(kernel, n);
  if (n == 0) return;
  visit_float_or_bf16(dtype, kernel, "gate", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    swiglu_bwd_elements<T><<<device::grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<const T*>(dy), static_cast<T*>(dgate),
        static_cast<T*>(dup), n);
  });
  check_launch(kernel);
}

void bias_add(DType dtype, const void* x, const void* bias, void* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  const char* kernel = "cuda bias_add";
  HSPMD_CHECK(rows >= 0 && cols > 0) << kernel << ": need rows >= 0 and cols > 0, got " << rows << ", " << cols;
  if (rows == 0) return;
  visit_float_or_bf16(dtype, kernel, "x", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    bias_add_elements<T><<<device::grid_for(rows * cols, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(bias), static_cast<T*>(y), rows * cols, cols);
  });
  check_launch(kernel);
}

void cast(DType from, const void* x, DType to, void* y, int64_t n, cudaStream_t stream) {
  const char* kernel = "cuda cast";
  check_count(kernel, n);
  if (n == 0) return;
  visit_floating(from, kernel, "x", [&](auto* from_tag) {
    using From = std::remove_pointer_t<decltype(from_tag)>;
    visit_floating(to, kernel, "y", [&](auto* to_tag) {
      using To = std::remove_pointer_t<decltype(to_tag)>;
      cast_elements<From, To><<<device::grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<const From*>(x),
                                                                                     static_cast<To*>(y), n);
    });
  });
  check_launch(kernel);
}

void round_to_bfloat16(const float* x, float* y, int64_t n, cudaStream_t stream) {
  const char* kernel = "cuda round_to_bfloat16";
  check_count(kernel, n);
  if (n == 0) return;
  round_to_bfloat16_elements<<<device::grid_for(n, kThreads), kThreads, 0, stream>>>(x, y, n);
  check_launch(kernel);
}

}  // namespace hspmd::kernels::cuda
