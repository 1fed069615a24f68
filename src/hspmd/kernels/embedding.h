// Embedding lookup: y[t, :] = table[ids[t] - vocab_start, :].
// table [V, H], ids [T] int64/int32, y [T, H]. For a vocab-parallel shard (table holds rows
// [vocab_start, vocab_start + V) of the full vocabulary) ids outside the shard give zero rows when
// outside_ids_are_zero; otherwise an id outside [vocab_start, vocab_start + V) is an Error naming
// the id and its position.
// Backward: dtable = scatter-add of dy rows into the ids' rows (overwritten: zeroed first); tokens
// whose id is padding_id add nothing (PyTorch's padding_idx: that row gets no gradient).
#pragma once

#include <cstdint>

#include "hspmd/core/tensor.h"

namespace hspmd::kernels {

struct EmbeddingOptions {
  int64_t vocab_start = 0;
  bool outside_ids_are_zero = false;
  int64_t padding_id = -1;  // a global id; -1: none
};

void embedding_fwd(const Tensor& table, const Tensor& ids, const Tensor& y, const EmbeddingOptions& options = {});
void embedding_bwd(const Tensor& ids, const Tensor& dy, const Tensor& dtable, const EmbeddingOptions& options = {});

}  // namespace hspmd::kernels
