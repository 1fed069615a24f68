// AdamW on a CUDA device for many tensors at once (the math of kernels/adamw.h, float32 master
// weights), with gradient-norm clipping folded in and no host synchronization:
//
//   std::vector<AdamWTensor> ts = {{.param = w, .grad = dw, .m = m, .v = v, .numel = n}, ...};
//   grad_sum_of_squares(ts, sumsq, stream);                   // sum of every grad^2 -> *sumsq
//   adamw_step(ts, step, options, {.max_grad_norm = 1.0, .sum_of_squares = sumsq}, stream);
//
// The clip factor is computed on the device from *sum_of_squares (the runtime's rule: with
// norm = sqrt(sum), max_grad_norm / norm when norm > max_grad_norm, else 1) and multiplies
// options.grad_scale, so the host never waits for the norm. Each launch covers up to
// kAdamWTensorsPerLaunch tensors in chunks of 4096 elements per block: few launches for a model's
// hundreds of parameters. An optional bf16 copy of each updated parameter (the operands of the
// next step's bf16 GEMMs) is written in the same pass, saving a cast kernel's read of the weights.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "hspmd/kernels/adamw.h"

namespace hspmd::kernels::cuda {

inline constexpr int kAdamWTensorsPerLaunch = 32;

// One parameter and its state, float32 device pointers of numel elements each.
struct AdamWTensor {
  float* param = nullptr;
  const float* grad = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  int64_t numel = 0;
  __nv_bfloat16* param_bf16 = nullptr;  // optional: receives the updated param rounded to bfloat16
};

struct AdamWClipping {
  double max_grad_norm = 0;                // 0: no clipping
  const double* sum_of_squares = nullptr;  // device float64 from grad_sum_of_squares; needed to clip
};

// *sum_of_squares (device float64) = sum over every tensor's grad of grad^2 (overwritten).
void grad_sum_of_squares(std::span<const AdamWTensor> tensors, double* sum_of_squares, cudaStream_t stream);
// *sum_of_squares += the same sum (a running total kept on the device across calls).
void add_grad_sum_of_squares(std::span<const AdamWTensor> tensors, double* sum_of_squares, cudaStream_t stream);

// One AdamW step of every tensor; step counts from 1.
void adamw_step(std::span<const AdamWTensor> tensors, int64_t step, const AdamWOptions& options,
                const AdamWClipping& clipping, cudaStream_t stream);

}  // namespace hspmd::kernels::cuda
