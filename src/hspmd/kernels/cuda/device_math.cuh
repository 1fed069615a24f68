// Device-side helpers shared by the CUDA kernels (included by .cu files only): float32 arithmetic
// on float32 or bfloat16 storage, block-wide reductions, and the host-side dtype dispatch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "hspmd/core/dtype.h"
#include "hspmd/core/error.h"

namespace hspmd::kernels::cuda::device {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(double x) { return static_cast<float>(x); }

// float32 to the storage type; to bfloat16 rounds to nearest even, as BFloat16 on the host.
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// expf, not __expf: the ops using it are bound by memory traffic and can afford the exact one.
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// The sum (or max) of every thread's v, returned to every thread of the block. blockDim.x is a
// multiple of 32, at most 1024; `scratch` holds 32 floats. Ends with a barrier, so scratch may be
// reused by the next call.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads();
  return v;
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  v = warp_max(v);
  __syncthreads();
  return v;
}

// Threads for a row-per-block kernel: a warp multiple up to 1024, no more than the row needs.
inline int row_threads(int64_t cols) {
  int threads = 32;
  while (threads < 1024 && threads < cols) threads *= 2;
  return threads;
}

// Grid for `n` elements, `threads` per block, each thread striding over the rest.
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 16 ? 65535 * 16 : blocks));
}

}  // namespace hspmd::kernels::cuda::device

namespace hspmd::kernels::cuda {

// Calls f with a null pointer of the storage type of `dtype` (float or __nv_bfloat16): the
// kernels' dtype dispatch. Other dtypes are an Error naming the kernel and the tensor.
template <typename F>
void visit_float_or_bf16(DType dtype, const char* kernel, const char* tensor, F&& f) {
  switch (dtype) {
    case DType::kFloat32: f(static_cast<float*>(nullptr)); return;
    case DType::kBFloat16: f(static_cast<__nv_bfloat16*>(nullptr)); return;
    case DType::kFloat64:
    case DType::kInt32:
    case DType::kInt64: break;
  }
  HSPMD_THROW() << kernel << ": " << tensor << " is " << dtype_name(dtype) << "; the CUDA kernel takes float32 or bfloat16";
}

// Throws the launch's error (bad configuration), naming the kernel; asynchronous faults surface at
// the next synchronization.
inline void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  HSPMD_CHECK(status == cudaSuccess) << kernel << ": launch failed: " << cudaGetErrorName(status) << " ("
                                     << cudaGetErrorString(status) << ")";
}

}  // namespace hspmd::kernels::cuda
