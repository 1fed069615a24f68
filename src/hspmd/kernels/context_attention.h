// Causal varlen attention for context parallelism (docs/context-parallelism.md): the query rows one
// rank holds against the whole batch's keys and values, every row tagged with its position in the
// packed batch, so the rows may come in any order (the load-balanced "zigzag" order of a CP group).
//
//   q [Tq, Nq, D]          the rank's query rows
//   k, v [Tk, Nkv, D]      every key/value row of the packed batch (all-gathered over the CP group)
//   cu_seqlens [nseq + 1]  int32/int64 document offsets in the packed batch, cu_seqlens.back() == Tk
//   q_index [Tq] int64     packed position of each query row (distinct, in [0, Tk))
//   kv_index [Tk] int64    packed position of each k/v row (a permutation of 0..Tk-1)
//   out [Tq, Nq, D], lse [Nq, Tq] (as kernels/attention.h)
// A query at packed position p of document s attends to the keys at packed positions cu_seqlens[s]..p.
// The backward gives dq [Tq, ...] and this rank's share of dk, dv [Tk, ...] (rows in kv_index order):
// the contributions of ITS queries, which the CP group sums (a reduce-scatter).
//
// With q_index = kv_index = 0..T-1 (one rank, or no context parallelism) this IS attention_fwd/bwd:
// they are called, so a run without CP is bitwise what it was.
#pragma once

#include "hspmd/core/tensor.h"
#include "hspmd/kernels/attention.h"

namespace hspmd::kernels {

void context_attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens,
                           const Tensor& q_index, const Tensor& kv_index, const Tensor& out, const Tensor& lse,
                           const AttentionOptions& options = {});
void context_attention_bwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens,
                           const Tensor& q_index, const Tensor& kv_index, const Tensor& out, const Tensor& lse,
                           const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                           const AttentionOptions& options = {});

}  // namespace hspmd::kernels
