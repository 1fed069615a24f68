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
  // > 0: every logit z counts as softcap * tanh(z / softcap) (Gemma's final logit soft-capping);
  // the backward's dlogits are those of the raw logits. 0: no capping.
  double softcap = 0.0;
  // Vocabulary parallelism: the logits hold the columns [vocab_start, vocab_start + vocab) of rows
  // vocab_size wide (0: the logits hold whole rows). A target is then valid in [0, vocab_size), and
  // the backward's lse must be the whole row's (combined from every shard's statistics).
  int64_t vocab_start = 0;
  int64_t vocab_size = 0;
};

void cross_entropy_fwd(DType dtype, const void* logits, DType targets_dtype, const void* targets, float* losses,
                       float* lse, const CrossEntropyShape& shape, cudaStream_t stream);
void cross_entropy_bwd(DType dtype, const void* logits, DType targets_dtype, const void* targets, const float* lse,
                       const float* dlosses, void* dlogits, const CrossEntropyShape& shape, cudaStream_t stream);

// One vocabulary shard's row statistics (kernels/cross_entropy.h, cross_entropy_shard_stats), float64
// on the device: stats[t] = the row's max, stats[stride + t] = sum_j exp(logit - max),
// stats[2 * stride + t] = the target's logit when this shard holds it (else 0; NaN for a target
// outside [0, row width) that is not ignore_index). stride >= tokens lets a caller fill a [3, T]
// block chunk by chunk (stats + first, stride T). Computed in float32, as cross_entropy_fwd.
void cross_entropy_shard_stats(DType dtype, const void* logits, DType targets_dtype, const void* targets,
                               double* stats, int64_t stride, const CrossEntropyShape& shape, cudaStream_t stream);

// The graph's token-loss ops around the two above, with their scalars on the device (no host
// round trip in a step): loss[0] = loss_scale[0] * sum_t losses[t] (summed in float64, as the CPU
// op does), and dlosses[t] = dloss[0] * loss_scale[0] for every t.
void scaled_loss_sum(const float* losses, int64_t tokens, const float* loss_scale, float* loss, cudaStream_t stream);
void token_loss_grads(const float* loss_scale, const float* dloss, float* dlosses, int64_t tokens,
                      cudaStream_t stream);

}  // namespace hspmd::kernels::cuda
