// Token-level cross-entropy from logits, numerically stable (log-sum-exp with the row max).
//   losses[t] = logsumexp(logits[t, :]) - logits[t, targets[t]]     (0 where targets[t] == ignore_index)
// logits [T, V] float32/float64, targets [T] int64/int32, losses [T] and lse [T] like logits
// (lse saved for the backward). A target outside [0, V) that is not ignore_index is an Error.
// Backward: dlogits[t, :] = dlosses[t] * (softmax(logits[t, :]) - onehot(targets[t]))
// (zero rows for ignored tokens). Normalization (e.g. by the global token count) is the caller's,
// through dlosses.
//
// Vocab-parallel use: a rank holding the vocabulary columns [vocab_start, vocab_start + V_local)
// of a vocab_size-wide row computes its shard's row statistics, the shards' statistics are
// gathered (one all-gather in the runtime), and every shard combines them into the same loss and
// lse; the backward then needs no communication (lse is the whole row's):
//   cross_entropy_shard_stats(my_logits, targets, stats, o);   // stats [3, T] float64
//   gather stats of the k shards into all [k, 3, T]
//   cross_entropy_combine(all, targets, losses, lse, o);
//   cross_entropy_bwd(my_logits, targets, lse, dlosses, my_dlogits, o);
// cross_entropy_fwd is exactly shard_stats + combine over one shard.
#pragma once

#include <cstdint>

#include "hspmd/core/tensor.h"

namespace hspmd::kernels {

struct CrossEntropyOptions {
  int64_t ignore_index = -100;
  int64_t vocab_start = 0;  // first vocabulary column the logits hold
  int64_t vocab_size = 0;   // width of a whole row; 0: the logits hold the whole row
  // > 0: every logit z is replaced by softcap * tanh(z / softcap) first (Gemma's final logit
  // soft-capping); the backward returns the gradient of the raw logits. 0: no capping.
  double softcap = 0.0;
};

// Row statistics of one vocabulary shard, float64 [3, T]: stats[0, t] = max_j logits[t, j],
// stats[1, t] = sum_j exp(logits[t, j] - stats[0, t]), stats[2, t] = the target's logit when the
// target falls in this shard (else 0; 0 for ignored tokens).
void cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets, const Tensor& stats,
                               const CrossEntropyOptions& options = {});
// Combines the statistics of every shard of the row, all [k, 3, T] (any order), into losses and lse.
void cross_entropy_combine(const Tensor& all_stats, const Tensor& targets, const Tensor& losses, const Tensor& lse,
                           const CrossEntropyOptions& options = {});

// Every target is in [0, row width) or ignore_index (the row width: options.vocab_size, or
// `columns` when that is 0); the Error names `kernel` and the first bad token's position.
void check_cross_entropy_targets(const char* kernel, const Tensor& targets, int64_t columns,
                                 const CrossEntropyOptions& options = {});

void cross_entropy_fwd(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse,
                       const CrossEntropyOptions& options = {});
void cross_entropy_bwd(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& dlosses,
                       const Tensor& dlogits, const CrossEntropyOptions& options = {});

}  // namespace hspmd::kernels
