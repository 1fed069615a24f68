// Causal self-attention over variable-length packed sequences, grouped-query heads.
//
//   q [T, Nq, D], k [T, Nkv, D], v [T, Nkv, D], out [T, Nq, D]; Nkv divides Nq (query head h uses
//   kv head h / (Nq / Nkv)). cu_seqlens [nseq + 1] int32/int64: sequence s is tokens
//   [cu_seqlens[s], cu_seqlens[s+1]); cu_seqlens[0] == 0, cu_seqlens[nseq] == T. A token attends to
//   itself and earlier tokens of its own sequence only; with a sliding window W (options.window), the
//   token at position i attends to the tokens j of its sequence with i - W < j <= i: W keys, itself
//   included (transformers' sliding_window, Mistral and Gemma 3: kv_idx > q_idx - sliding_window).
//   lse [Nq, T] float32/float64 like q: per-row log-sum-exp of the scaled scores, saved for the
//   backward.
//
// Blocked online-softmax (flash-style): memory beyond the outputs is O(block^2) per thread,
// never O(S^2) per head. Under a window, blocks of keys outside every query's window are skipped:
// the work is O(T * (W + block)) per head instead of O(T * S).
#pragma once

#include "hspmd/core/tensor.h"

namespace hspmd::kernels {

struct AttentionOptions {
  double scale = 0.0;  // softmax scale; 0 means 1/sqrt(D)
  // float32 only: q, k, v (and dout in the backward) rounded to bfloat16 before any product
  // (bf16 mixed precision, kernels/bf16_rounding.h). Scores, softmax, lse and every output and
  // accumulation stay float32.
  bool bf16_operands = false;
  int64_t window = 0;  // sliding window W (>= 0); 0: none, every earlier key of the sequence
};

void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens, const Tensor& out,
                   const Tensor& lse, const AttentionOptions& options = {});
void attention_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens, const Tensor& out,
                   const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                   const AttentionOptions& options = {});

}  // namespace hspmd::kernels
