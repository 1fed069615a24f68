// The lm head and the token cross-entropy in one kernel pair that never holds the logits [T, V]
// whole: tokens go through in chunks, and each chunk's logits live in one scratch buffer.
//
//   logits = x @ w^T      x [T, H] (final hidden states), w [V, H] (the head; under vocabulary
//                         parallelism this rank's rows [vocab_start, vocab_start + V))
//   lm_head_loss_stats(x, w, targets, stats, o);   // stats [3, T] float64, as cross_entropy_shard_stats(logits)
//   cross_entropy_combine(stats of every shard, targets, losses, lse, o.loss);
//   lm_head_loss_bwd(x, w, targets, lse, dlosses, dx, dw, o);
//     dlogits = cross_entropy_bwd(logits, ...);  dx = dlogits @ w;  dw = dlogits^T @ x
//
// Per chunk of C tokens: the forward is one product [C, H] x [H, V] and the row statistics; the
// backward computes the chunk's logits again, turns them into dlogits in place, and adds the two
// gradient products (dw accumulates over the chunks). Memory: a [C, V] buffer instead of the
// whole logits and their gradient (2 x T x V floats, e.g. 2 x 262 MB for 2048 tokens and a
// vocabulary of 32000); time: one more T x V x H product than a separate matmul and cross-entropy
// (4 instead of 3), against three fewer passes over T x V logits in memory.
// The results equal matmul + cross_entropy up to the order of additions (dw sums chunk by chunk).
#pragma once

#include <cstdint>

#include "hspmd/core/allocator.h"
#include "hspmd/core/tensor.h"
#include "hspmd/kernels/cross_entropy.h"

namespace hspmd::kernels {

struct LmHeadLossOptions {
  CrossEntropyOptions loss;    // ignore_index, and this shard's vocabulary columns
  bool bf16_operands = false;  // round x, w and dlogits to bfloat16 before each product (float32
                               // accumulation), as matmul's option of that name does
  int64_t chunk_rows = 0;      // tokens per chunk; 0: about 64 MiB of float32 logits, at least 128 tokens
  Allocator* allocator = nullptr;  // where the chunk's logits live (counted in its peak); null: default
};

// Tokens per chunk for T tokens and V rows of w: the scratch is that many rows of V logits.
int64_t lm_head_loss_chunk_rows(int64_t tokens, int64_t vocab, const LmHeadLossOptions& options = {});

// stats [3, T] float64: each token's max logit, sum of exp(logit - max) and the target's logit in
// this shard (kernels/cross_entropy.h).
void lm_head_loss_stats(const Tensor& x, const Tensor& w, const Tensor& targets, const Tensor& stats,
                        const LmHeadLossOptions& options = {});
// lse [T]: whole-row log-sum-exp (from cross_entropy_combine); dlosses [T]: d loss / d losses[t].
// Writes dx [T, H] and dw [V, H].
void lm_head_loss_bwd(const Tensor& x, const Tensor& w, const Tensor& targets, const Tensor& lse,
                      const Tensor& dlosses, const Tensor& dx, const Tensor& dw, const LmHeadLossOptions& options = {});

}  // namespace hspmd::kernels
