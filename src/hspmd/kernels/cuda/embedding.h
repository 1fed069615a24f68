// Embedding on a CUDA device, the math of kernels/embedding.h on device pointers:
//   y[t, :] = table[ids[t] - vocab_start, :]
// table [vocab, hidden] and y [tokens, hidden] of `dtype` (float32 or bfloat16); ids [tokens] int64
// or int32 (ids_dtype). An id outside [vocab_start, vocab_start + vocab) gives a zero row: that is
// a vocab-parallel shard's rule (outside_ids_are_zero); the CPU kernel's error for such an id in an
// unsharded table is the host's to raise, where the batch is read (a kernel cannot throw).
// Backward: dtable [vocab, hidden] float32 = the scatter-add of dy's rows (dy of `dtype`) but those of
// padding_id's tokens, overwritten. It adds with atomics, so the order of additions to a row used by several tokens,
// and with it the last bits, may change from run to run.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "hspmd/core/dtype.h"

namespace hspmd::kernels::cuda {

struct EmbeddingShape {
  int64_t tokens = 0;
  int64_t vocab = 0;        // rows of the table (this shard's)
  int64_t hidden = 0;
  int64_t vocab_start = 0;  // the first id the table holds
  int64_t padding_id = -1;  // backward: tokens of this (global) id add nothing; -1: none
};

void embedding_fwd(DType dtype, const void* table, DType ids_dtype, const void* ids, void* y,
                   const EmbeddingShape& shape, cudaStream_t stream);
void embedding_bwd(DType dtype, DType ids_dtype, const void* ids, const void* dy, float* dtable,
                   const EmbeddingShape& shape, cudaStream_t stream);

}  // namespace hspmd::kernels::cuda
