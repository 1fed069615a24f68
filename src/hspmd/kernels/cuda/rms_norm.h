// RMSNorm on a CUDA device, the math of kernels/rms_norm.h on device pointers:
//   y[t, :] = x[t, :] * rstd[t] * (weight_offset + weight[:]),   rstd[t] = 1 / sqrt(mean(x[t, :]^2) + eps)
// (weight_offset 1 is Gemma's norm; 0 the usual one)
// x, y, dy, dx, weight [rows, cols] / [cols] of `dtype` (float32, or bfloat16 storage computed in
// float32); rstd [rows] float32 (saved for the backward); dweight [cols] float32 (a sum over every
// row, kept in float32 whatever the activations' dtype), overwritten. dx may be x or dy.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "hspmd/core/dtype.h"

namespace hspmd::kernels::cuda {

void rms_norm_fwd(DType dtype, const void* x, const void* weight, float eps, void* y, float* rstd, int64_t rows,
                  int64_t cols, cudaStream_t stream, float weight_offset = 0.0f);
void rms_norm_bwd(DType dtype, const void* x, const void* weight, const float* rstd, const void* dy, void* dx,
                  float* dweight, int64_t rows, int64_t cols, cudaStream_t stream, float weight_offset = 0.0f);

}  // namespace hspmd::kernels::cuda
