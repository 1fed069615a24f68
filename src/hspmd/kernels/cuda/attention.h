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

// Context parallelism (kernels/context_attention.h), on the reference kernel: the shape.tokens
// query rows of q, out, lse, dout and dq sit at the packed positions q_index [tokens]; k, v, dk and
// dv hold `keys` rows whose packed positions are kv_index [keys] (a permutation of 0..keys-1);
// cu_seqlens are offsets in the packed batch of `keys` tokens. dk and dv are these queries'
// contributions, rows in kv_index's order. The index vectors are the runtime's and are not checked
// here (a kernel cannot throw, and checking on the host would wait for the stream): an index out
// of range reads out of bounds. With q_index = kv_index = 0..T-1 this computes what
// reference_attention_fwd / _bwd do, in the same order of operations.
struct ContextRows {
  DType index_dtype = DType::kInt64;  // of q_index and kv_index: int64 or int32
  const void* q_index = nullptr;
  const void* kv_index = nullptr;
  int64_t keys = 0;
  int64_t* kv_row = nullptr;  // [keys] device scratch: the row of each packed position, filled here
};

void context_attention_fwd(DType dtype, const void* q, const void* k, const void* v, DType cu_seqlens_dtype,
                           const void* cu_seqlens, const ContextRows& rows, void* out, float* lse,
                           const AttentionShape& shape, cudaStream_t stream);
void context_attention_bwd(DType dtype, const void* q, const void* k, const void* v, DType cu_seqlens_dtype,
                           const void* cu_seqlens, const ContextRows& rows, const void* out, const float* lse,
                           const void* dout, float* dq, float* dk, float* dv, const AttentionShape& shape,
                           cudaStream_t stream);

}  // namespace hspmd::kernels::cuda
