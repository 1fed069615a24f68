// Flash attention on tensor cores for bfloat16 storage: the math of attention.h (causal, packed
// variable-length sequences, grouped-query heads, optional sliding window) in tiles of 64 queries
// by 64 keys held in shared memory, the products on tensor cores (nvcuda::wmma bf16 16x16x16
// fragments, float accumulation), an online softmax, never the whole score matrix. Head dims 64
// and 128, 16-byte aligned tensors (attention_choice.h; attention_fwd / attention_bwd choose it).
//   Forward: a block per (query tile, query head); P is rounded to bf16 for P V.
//   Backward, from the saved lse, two kernels without atomics (so deterministic): a block per
//   (key tile, kv head) recomputes P and dS tile by tile over every query head of its group and
//   every query tile that sees its keys, accumulating dK and dV in registers; a block per (query
//   tile, query head) recomputes them again over its key tiles for dQ. dS is rounded to bf16 for
//   its products.
// Same arguments as attention_fwd / attention_bwd with dtype bfloat16.
#pragma once

#include <cuda_runtime_api.h>

#include "hspmd/kernels/cuda/attention.h"

namespace hspmd::kernels::cuda {

void flash_attention_fwd(const void* q, const void* k, const void* v, DType cu_seqlens_dtype, const void* cu_seqlens,
                         void* out, float* lse, const AttentionShape& shape, cudaStream_t stream);
void flash_attention_bwd(const void* q, const void* k, const void* v, DType cu_seqlens_dtype, const void* cu_seqlens,
                         const void* out, const float* lse, const void* dout, float* dq, float* dk, float* dv,
                         const AttentionShape& shape, cudaStream_t stream);

}  // namespace hspmd::kernels::cuda
