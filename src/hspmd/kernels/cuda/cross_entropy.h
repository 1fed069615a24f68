// Token-level cross-entropy on a CUDA device, the math of kernels/cross_entropy.h on device
// pointers, for a whole vocabulary row per token:
//   losses[t] = logsumexp(logits[t, :]) - logits[t, targets[t]]   (0 where targets[t] == ignore_index)
//   dlogits[t, :] = dlosses[t] * (softmax(logits[t, :]) - onehot(targets[t]))   (zero rows if ignored)
// logits, dlogits [tokens, vocab] of `dtype` (float32 or bfloat16, computed in float32); targets
// [tokens] int64 or int32; losses, lse, dlosses [tokens] float32 (lse saved for the backward).
// A target outside [0, vocab) that is not ignore_index gives a NaN loss and a NaN gradient row:
// targets are checked on the host where the batch is read (check_cross_entropy_targets), since a
// kernel cannot throw. dlogits may be logits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "hspmd/core/dtype.h"

namespace hspmd::kernels::cuda {

struct CrossEntropyShape {
  int64_t tokens = 0;
  int64_t vocab = 0;
  int64_t ignore_index = -100;
};

void cross_entropy_fwd(DType dtype, const void* logits, DType targets_dtype, const void* targets, float* losses,
                       float* lse, const CrossEntropyShape& shape, cudaStream_t stream);
void cross_entropy_bwd(DType dtype, const void* logits, DType targets_dtype, const void* targets, const float* lse,
                       const float* dlosses, void* dlogits, const CrossEntropyShape& shape, cudaStream_t stream);

}  // namespace hspmd::kernels::cuda
