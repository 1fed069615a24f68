// The lm head and the token cross-entropy on a CUDA device without the whole logits (the math of
// kernels/lm_head_loss.h for a whole vocabulary): tokens go through in chunks, each chunk's logits
// [C, V] float32 live in one scratch buffer from the caller's allocator.
//
//   forward, per chunk:  logits = x_c @ w^T (cuBLASLt), cross_entropy_fwd -> losses_c, lse_c
//   backward, per chunk: logits again, cross_entropy_bwd in place -> dlogits,
//                        dx_c = dlogits @ w,  dw += dlogits^T @ x_c
//
// x [T, H] and w [V, H] of `dtype`: float32, or bfloat16 operands with float32 accumulation (then
// dlogits is rounded to bfloat16 before its two products, as the CPU kernel's bf16_operands
// does). targets [T] int64 or int32; losses, lse, dlosses [T] float32; dx [T, H] and dw [V, H]
// float32, overwritten. Memory: C x V float32 logits (and C x V bfloat16 for bf16 operands)
// instead of 2 x T x V.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "hspmd/core/cuda/cuda_allocator.h"
#include "hspmd/core/dtype.h"
#include "hspmd/kernels/cuda/gemm.h"

namespace hspmd::kernels::cuda {

struct LmHeadLossShape {
  int64_t tokens = 0;
  int64_t hidden = 0;
  int64_t vocab = 0;
  int64_t ignore_index = -100;
  double softcap = 0.0;     // as CrossEntropyShape::softcap
  int64_t chunk_rows = 0;  // tokens per chunk; 0: about 256 MiB of float32 logits, at least 1
  // Vocabulary parallelism, as CrossEntropyShape's: w holds the rows [vocab_start, vocab_start +
  // vocab) of a vocab_size-row head (0: the whole head).
  int64_t vocab_start = 0;
  int64_t vocab_size = 0;
};

// What a run needs besides the tensors: the GEMM handle and where the chunk's scratch comes from.
struct LmHeadLossContext {
  CublasLtGemm& gemm;
  hspmd::cuda::CudaAllocator& memory;
  cudaStream_t stream;
};

void lm_head_loss_fwd(const LmHeadLossContext& ctx, DType dtype, const void* x, const void* w, DType targets_dtype,
                      const void* targets, float* losses, float* lse, const LmHeadLossShape& shape);
// A vocabulary shard's row statistics, float64 [3, tokens] (cross_entropy_shard_stats's), chunk by
// chunk; the loss and lse come from every shard's statistics combined (kernels/cross_entropy.h).
// lm_head_loss_bwd then takes the combined lse.
void lm_head_loss_stats(const LmHeadLossContext& ctx, DType dtype, const void* x, const void* w, DType targets_dtype,
                        const void* targets, double* stats, const LmHeadLossShape& shape);
void lm_head_loss_bwd(const LmHeadLossContext& ctx, DType dtype, const void* x, const void* w, DType targets_dtype,
                      const void* targets, const float* lse, const float* dlosses, float* dx, float* dw,
                      const LmHeadLossShape& shape);

}  // namespace hspmd::kernels::cuda
