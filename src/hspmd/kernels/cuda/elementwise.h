// Pointwise ops on a CUDA device, on device pointers (the math of kernels/elementwise.h, bias.h,
// cast.h and bf16_rounding.h; one translation unit for the four keeps nvcc's share of the build
// small). `dtype` is float32 or bfloat16 storage, computed in float32. Outputs may alias inputs.
//
//   swiglu_fwd:  y = silu(gate) * up                      (the Llama MLP)
//   swiglu_bwd:  dgate = dy * up * silu'(gate),  dup = dy * silu(gate)
//   geglu_tanh_fwd / _bwd: the same with gelu_tanh(gate) (Gemma's MLP)
//   add:         y = a + b;   scale: y = x * factor
//   sum_rows:    out[c] = sum_r x[r, c]                    (bias_add's backward: dbias)
//   bias_add:    y[r, c] = x[r, c] + bias[c]               (x, y [rows, cols], bias [cols])
//   cast:        any two of float32, float64, bfloat16; to bfloat16 rounds to nearest even
//   round_to_bfloat16: float32 -> the nearest bfloat16, kept in float32 (bf16 mixed precision)
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "hspmd/core/dtype.h"

namespace hspmd::kernels::cuda {

void swiglu_fwd(DType dtype, const void* gate, const void* up, void* y, int64_t n, cudaStream_t stream);
void swiglu_bwd(DType dtype, const void* gate, const void* up, const void* dy, void* dgate, void* dup, int64_t n,
                cudaStream_t stream);
void geglu_tanh_fwd(DType dtype, const void* gate, const void* up, void* y, int64_t n, cudaStream_t stream);
void geglu_tanh_bwd(DType dtype, const void* gate, const void* up, const void* dy, void* dgate, void* dup, int64_t n,
                    cudaStream_t stream);
void add(DType dtype, const void* a, const void* b, void* y, int64_t n, cudaStream_t stream);
// *total += x[0] in float64: a running total (a step's loss) kept on the device.
void add_element_to_total(DType dtype, const void* x, double* total, cudaStream_t stream);
void scale(DType dtype, const void* x, double factor, void* y, int64_t n, cudaStream_t stream);
void sum_rows(DType dtype, const void* x, void* out, int64_t rows, int64_t cols, cudaStream_t stream);
void bias_add(DType dtype, const void* x, const void* bias, void* y, int64_t rows, int64_t cols, cudaStream_t stream);
void cast(DType from, const void* x, DType to, void* y, int64_t n, cudaStream_t stream);
void round_to_bfloat16(const float* x, float* y, int64_t n, cudaStream_t stream);

}  // namespace hspmd::kernels::cuda
