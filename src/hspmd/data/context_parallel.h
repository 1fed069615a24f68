// The token layout of a context-parallel (CP) group of C ranks (docs/context-parallelism.md): which
// tokens of a packed micro-batch each rank holds, balanced for the causal mask.
//
// Each row of the batch (seq_len tokens or fewer, holding whole documents) is padded to a multiple
// of 2C tokens and cut into 2C equal chunks; rank c holds chunks c and 2C-1-c of every row
// ("zigzag"). Under a causal mask the work of a chunk grows with its position, so pairing an early
// chunk with the mirrored late one gives every rank the same work for a row filled by one document
// (and nearly the same for several). The padding is a document of its own at the end of its row
// (token 0, targets kIgnoreTarget): it attends only to itself and adds no loss.
//
// Sequence parallelism pads the same way: `row_multiple` (sharding::PipelineSchedule's
// sequence_parallel_multiple) makes every row a multiple of it as well, so each SP stage splits any
// micro-batch's tokens evenly over its TP x CP ranks (docs/memory.md).
//
//   one row a0..a7, C = 2: chunks {a0 a1} {a2 a3} {a4 a5} {a6 a7}
//     rank 0 holds a0 a1 a6 a7, rank 1 holds a2 a3 a4 a5      order = {0 1 6 7 2 3 4 5}
// The feed of a CP pipeline lists its tokens in `order` (rank 0's, then rank 1's, ...), so a split
// of the token dim into C equal parts gives each rank its chunks; `order[i]` is the packed position
// of fed token i, which attention needs to apply the causal mask (graph/ops/context_attention.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "hspmd/data/packing.h"

namespace hspmd::data {

struct ContextParallelBatch {
  Batch batch;                 // padded, in packed order (cu_seqlens include the padding documents)
  std::vector<int64_t> order;  // fed token i -> its packed position in `batch`
};

// Rows padded to a multiple of 2 cp (cp > 1) and of row_multiple. cp = 1: the identity order (and the
// batch unchanged when row_multiple = 1). Throws Error when cp < 1 or row_multiple < 1.
ContextParallelBatch zigzag_for_context_parallel(const Batch& batch, int cp, int64_t row_multiple = 1);

}  // namespace hspmd::data
