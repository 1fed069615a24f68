#include "hspmd/kernels/cuda/rms_norm.h"

#include "hspmd/kernels/cuda/device_math.cuh"

namespace hspmd::kernels::cuda {

namespace {

using device::from_float;
using device::to_float;

// One block per row.
template <typename T>
__global__ void rms_norm_fwd_rows(const T* x, const T* w, float eps, T* y, float* rstd, int64_t cols,
                                  float weight_offset) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * cols;
  float sumsq = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = to_float(xr[i]);
    sumsq += v * v;
  }
  sumsq = device::block_sum(sumsq, scratch);
  const float r = 1.0f / sqrtf(sumsq / static_cast<float>(cols) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  T* yr = y + row * cols;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    yr[i] = from_float<T>(to_float(xr[i]) * r * (weight_offset + to_float(w[i])));
  }
}

// With r = rstd[t] and g = dy * (weight_offset + w):  dx = r * g - x * r^3 * dot(g, x) / cols. One block per row;
// every element is read before any is written, so dx may alias x or dy.
template <typename T>
__global__ void rms_norm_dx_rows(const T* x, const T* w, const float* rstd, const T* dy, T* dx, int64_t cols,
                                 float weight_offset) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * cols;
  const T* dyr = dy + row * cols;
  float dot = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    dot += to_float(dyr[i]) * (weight_offset + to_float(w[i])) * to_float(xr[i]);
  }
  dot = device::block_sum(dot, scratch);
  const float r = rstd[row];
  const float c = r * r * r * dot / static_cast<float>(cols);
  T* dxr = dx + row * cols;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float xi = to_float(xr[i]);
    dxr[i] = from_float<T>(r * to_float(dyr[i]) * (weight_offset + to_float(w[i])) - xi * c);
  }
}

// dweight[i] = sum_t dy[t, i] * x[t, i] * rstd[t]: a block of 32 x 32 threads per 32 columns, each
// thread row summing every 32nd row, then the 32 partial sums of each column added.
template <typename T>
__global__ void rms_norm_dweight_columns(const T* x, const float* rstd, const T* dy, float* dw, int64_t rows,
                                         int64_t cols) {
  __shared__ float partial[32][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float sum = 0.0f;
  if (col < cols) {
    for (int64_t t = threadIdx.y; t < rows; t += 32) sum += to_float(dy[t * cols + col]) * to_float(x[t * cols + col]) * rstd[t];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int k = 0; k < 32; ++k) total += partial[k][threadIdx.x];
    dw[col] = total;
  }
}

void check_sizes(const char* kernel, int64_t rows, int64_t cols) {
  HSPMD_CHECK(rows >= 0 && cols > 0 && rows <= 0x7fffffff)
      << kernel << ": need 0 <= rows < 2^31 and cols > 0, got rows " << rows << ", cols " << cols;
}

}  // namespace

void rms_norm_fwd(DType dtype, const void* x, const void* weight, float eps, void* y, float* rstd, int64_t rows,
                  int64_t cols, cudaStream_t stream, float weight_offset) {
  const char* kernel = "cuda rms_norm_fwd";
  check_sizes(kernel, rows, cols);
  if (rows == 0) return;
  visit_float_or_bf16(dtype, kernel, "x", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    rms_norm_fwd_rows<T><<<static_cast<unsigned>(rows), device::row_threads(cols), 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(weight), eps, static_cast<T*>(y), rstd, cols, weight_offset);
  });
  check_launch(kernel);
}

void rms_norm_bwd(DType dtype, const void* x, const void* weight, const float* rstd, const void* dy, void* dx,
                  float* dweight, int64_t rows, int64_t cols, cudaStream_t stream, float weight_offset) {
  const char* kernel = "cuda rms_norm_bwd";
  check_sizes(kernel, rows, cols);
  visit_float_or_bf16(dtype, kernel, "x", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    // dweight first: it reads dy and x, which dx may overwrite.
    rms_norm_dweight_columns<T><<<static_cast<unsigned>((cols + 31) / 32), dim3(32, 32), 0, stream>>>(
        static_cast<const T*>(x), rstd, static_cast<const T*>(dy), dweight, rows, cols);
    if (rows > 0) {
      rms_norm_dx_rows<T><<<static_cast<unsigned>(rows), device::row_threads(cols), 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(weight), rstd, static_cast<const T*>(dy), static_cast<T*>(dx),
          cols, weight_offset);
    }
  });
  check_launch(kernel);
}

}  // namespace hspmd::kernels::cuda
