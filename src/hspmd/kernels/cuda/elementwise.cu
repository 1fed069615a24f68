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

// gelu with the tanh approximation and its derivative, as kernels/cpu/elementwise.cc:
// d/dx [x/2 (1 + tanh u)] = (1 + t)/2 + x/2 (1 - t^2) du/dx,  u = c (x + k x^3),  du/dx = c (1 + 3 k x^2).
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kGeluCoef = 0.044715f;
__device__ __forceinline__ float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kGeluCoef * x * x * x)));
}
__device__ __forceinline__ float gelu_tanh_grad(float x) {
  const float t = tanhf(kSqrt2OverPi * (x + kGeluCoef * x * x * x));
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoef * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

template <typename T>
__global__ void geglu_tanh_fwd_elements(const T* gate, const T* up, T* y, int64_t n) {
  HSPMD_GRID_STRIDE(i, n) { y[i] = from_float<T>(gelu_tanh(to_float(gate[i])) * to_float(up[i])); }
}

template <typename T>
__global__ void geglu_tanh_bwd_elements(const T* gate, const T* up, const T* dy, T* dgate, T* dup, int64_t n) {
  HSPMD_GRID_STRIDE(i, n) {
    const float g = to_float(gate[i]), u = to_float(up[i]), d = to_float(dy[i]);
    dgate[i] = from_float<T>(d * u * gelu_tanh_grad(g));
    dup[i] = from_float<T>(d * gelu_tanh(g));
  }
}

template <typename T>
__global__ void add_elements(const T* a, const T* b, T* y, int64_t n) {
  HSPMD_GRID_STRIDE(i, n) { y[i] = from_float<T>(to_float(a[i]) + to_float(b[i])); }
}

template <typename T>
__global__ void scale_elements(const T* x, float factor, T* y, int64_t n) {
  HSPMD_GRID_STRIDE(i, n) { y[i] = from_float<T>(to_float(x[i]) * factor); }
}

// out[c] = sum_r x[r, c]: a block of 32 x 32 threads per 32 columns, each thread row summing every
// 32nd row, then the 32 partial sums of each column added (as rms_norm's dweight).
template <typename T>
__global__ void sum_rows_columns(const T* x, T* out, int64_t rows, int64_t cols) {
  __shared__ float partial[32][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float sum = 0.0f;
  if (col < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += 32) sum += to_float(x[r * cols + col]);
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int k = 0; k < 32; ++k) total += partial[k][threadIdx.x];
    out[col] = from_float<T>(total);
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

void geglu_tanh_fwd(DType dtype, const void* gate, const void* up, void* y, int64_t n, cudaStream_t stream) {
  const char* kernel = "cuda geglu_tanh_fwd";
  check_count(kernel, n);
  if (n == 0) return;
  visit_float_or_bf16(dtype, kernel, "gate", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    geglu_tanh_fwd_elements<T><<<device::grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(y), n);
  });
  check_launch(kernel);
}

void geglu_tanh_bwd(DType dtype, const void* gate, const void* up, const void* dy, void* dgate, void* dup, int64_t n,
                    cudaStream_t stream) {
  const char* kernel = "cuda geglu_tanh_bwd";
  check_count(kernel, n);
  if (n == 0) return;
  visit_float_or_bf16(dtype, kernel, "gate", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    geglu_tanh_bwd_elements<T><<<device::grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<const T*>(dy), static_cast<T*>(dgate),
        static_cast<T*>(dup), n);
  });
  check_launch(kernel);
}

void add(DType dtype, const void* a, const void* b, void* y, int64_t n, cudaStream_t stream) {
  const char* kernel = "cuda add";
  check_count(kernel, n);
  if (n == 0) return;
  visit_float_or_bf16(dtype, kernel, "a", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    add_elements<T><<<device::grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), n);
  });
  check_launch(kernel);
}

namespace {
template <typename T>
__global__ void add_element_into(const T* x, double* total) {
  if constexpr (std::is_same_v<T, double>) {
    *total += x[0];
  } else {
    *total += static_cast<double>(static_cast<float>(x[0]));  // bfloat16 converts through float
  }
}
}  // namespace

void add_element_to_total(DType dtype, const void* x, double* total, cudaStream_t stream) {
  const char* kernel = "cuda add_element_to_total";
  visit_floating(dtype, kernel, "x", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    add_element_into<T><<<1, 1, 0, stream>>>(static_cast<const T*>(x), total);
  });
  check_launch(kernel);
}

void scale(DType dtype, const void* x, double factor, void* y, int64_t n, cudaStream_t stream) {
  const char* kernel = "cuda scale";
  check_count(kernel, n);
  if (n == 0) return;
  visit_float_or_bf16(dtype, kernel, "x", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    scale_elements<T><<<device::grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<float>(factor), static_cast<T*>(y), n);
  });
  check_launch(kernel);
}

void sum_rows(DType dtype, const void* x, void* out, int64_t rows, int64_t cols, cudaStream_t stream) {
  const char* kernel = "cuda sum_rows";
  HSPMD_CHECK(rows >= 0 && cols > 0) << kernel << ": need rows >= 0 and cols > 0, got " << rows << ", " << cols;
  visit_float_or_bf16(dtype, kernel, "x", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    sum_rows_columns<T><<<static_cast<unsigned>((cols + 31) / 32), dim3(32, 32), 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(out), rows, cols);
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
