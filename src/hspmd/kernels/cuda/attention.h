// Causal attention over packed variable-length sequences with grouped-query heads on a CUDA
// device: the math of kernels/attention.h on device pointers. attention_fwd / attention_bwd run the
// flash kernel (flash_attention.h: tensor cores, bf16 storage, head dims 64 and 128) where it
// applies and the simple reference kernel otherwise (attention_choice.h; HSPMD_CUDA_ATTENTION=
// reference forces the reference). The reference kernel is the oracle the flash one is checked
// against, as the CPU kernel is for it. Not fast: one block per (query token, head), keys in
// chunks of the block's size with an online softmax, scores on the CUDA cores.
//
//   q [T, Nq, D], k and v [T, Nkv, D], out [T, Nq, D] of `dtype` (float32 or bfloat16, computed
//   in float32); Nkv divides Nq (query head h reads kv head h / (Nq / Nkv)); cu_seqlens
//   [nseq + 1] int32 or int64 (sequence s is tokens [cu_seqlens[s], cu_seqlens[s + 1]));
//   lse [Nq, T] float32, saved for the backward. D <= 256. A sliding window (shape.window) starts
//   each query's keys at its window.
//   Backward: dq [T, Nq, D], dk and dv [T, Nkv, D] float32 (the reference kernel sums dk and dv
//   over the queries and the query heads of a group with atomics, so their last bits may vary from
//   run to run; the flash kernel's are deterministic).
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

// The reference kernel alone, whatever the dispatch would choose (the flash kernel's oracle).
void reference_attention_fwd(DType dtype, const void* q, const void* k, const void* v, DType cu_seqlens_dtype,
                             const void* cu_seqlens, void* out, float* lse, const AttentionShape& shape,
                             cudaStream_t stream);
void reference_attention_bwd(DType dtype, const void* q, const void* k, const void* v, DType cu_seqlens_dtype,
                             const void* cu_seqlens, const void* out, const float* lse, const void* dout, float* dq,
                             float* dk, float* dv, const AttentionShape& shape, cudaStream_t stream);

}  // namespace hspmd::kernels::cuda
