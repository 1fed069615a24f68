// Causal attention over packed variable-length sequences with grouped-query heads on a CUDA
// device: the math of kernels/attention.h on device pointers, written as the simple reference a
// fast kernel (cuDNN's fused attention, or a flash-style kernel with tensor cores) is checked
// against, as the CPU kernel is for it. Not fast: one block per (query token, head), keys in
// chunks of the block's size with an online softmax, scores on the CUDA cores.
//
//   q [T, Nq, D], k and v [T, Nkv, D], out [T, Nq, D] of `dtype` (float32 or bfloat16, computed
//   in float32); Nkv divides Nq (query head h reads kv head h / (Nq / Nkv)); cu_seqlens
//   [nseq + 1] int32 or int64 (sequence s is tokens [cu_seqlens[s], cu_seqlens[s + 1]));
//   lse [Nq, T] float32, saved for the backward. D <= 256. A sliding window (shape.window) starts
//   each query's keys at its window.
//   Backward: dq [T, Nq, D], dk and dv [T, Nkv, D] float32 (dk and dv sum over the queries and
//   the query heads of a group with atomics, so their last bits may vary from run to run).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "hspmd/core/dtype.h"

namespace hspmd::kernels::cuda {

struct AttentionShape {
  int64_t tokens = 0;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t sequences = 0;  // cu_seqlens holds sequences + 1 offsets
  double scale = 0.0;     // 0: 1 / sqrt(head_dim)
  int64_t window = 0;     // sliding window as in kernels/attention.h (keys i - window < j <= i); 0: none
};

void attention_fwd(DType dtype, const void* q, const void* k, const void* v, DType cu_seqlens_dtype,
                   const void* cu_seqlens, void* out, float* lse, const AttentionShape& shape, cudaStream_t stream);
void attention_bwd(DType dtype, const void* q, const void* k, const void* v, DType cu_seqlens_dtype,
                   const void* cu_seqlens, const void* out, const float* lse, const void* dout, float* dq, float* dk,
                   float* dv, const AttentionShape& shape, cudaStream_t stream);

}  // namespace hspmd::kernels::cuda
