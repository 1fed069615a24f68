// Token-level cross-entropy from logits, numerically stable (log-sum-exp with the row max).
//   losses[t] = logsumexp(logits[t, :]) - logits[t, targets[t]]     (0 where targets[t] == ignore_index)
// logits [T, V] float32/float64, targets [T] int64/int32, losses [T] and lse [T] like logits
// (lse saved for the backward). A target outside [0, V) that is not ignore_index is an Error.
// Backward: dlogits[t, :] = dlosses[t] * (softmax(logits[t, :]) - onehot(targets[t]))
// (zero rows for ignored tokens). Normalization (e.g. by the global token count) is the caller's,
// through dlosses.
#pragma once

#include <cstdint>

#include "hspmd/core/tensor.h"

namespace hspmd::kernels {

struct CrossEntropyOptions {
  int64_t ignore_index = -100;
};

void cross_entropy_fwd(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse,
                       const CrossEntropyOptions& options = {});
void cross_entropy_bwd(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& dlosses,
                       const Tensor& dlogits, const CrossEntropyOptions& options = {});

}  // namespace hspmd::kernels
