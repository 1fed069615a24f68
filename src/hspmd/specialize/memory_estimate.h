// Memory a rank needs for a plan and schedule, estimated from the annotations before anything is
// allocated, so a plan that cannot fit is refused up front (naming the rank and the figures)
// instead of failing with out-of-memory in the middle of a step.
//
//   MemoryEstimate m = estimate_memory(exec_graph, {.micro_batch_tokens = 2 * 256,
//                                                  .micro_batches_in_flight = 2});
//   m.to_string()  // "2.1 MiB parameters + 2.1 MiB gradients + 4.2 MiB optimizer states +
//                  //  1.3 MiB activations = 9.7 MiB"
// Parameters: the rank's shards. Gradients: the accumulators (parameter layout) plus the synced
// gradients (optimizer-state layout); under ZeRO-2 with one micro-batch per gradient group, the
// synced shard plus what a backward pass's whole gradient needs beyond the forward pass's
// transient values (the two never coexist). Under ZeRO-3 parameters are the state shard plus the
// most a pass holds gathered (specialize/gather_units.h: about the layer it runs and the next one),
// gradients the state shard plus the largest parameter's, twice when the communication thread
// reduces one while B computes the next (MemoryEstimateOptions::gradients_reduced_on_a_thread).
// Optimizer states: AdamW's two moments on the state shard.
// Activations: the forward values a micro-batch keeps for its backward pass (with recompute, only
// what B does not replay: specialize/exec_graph.h), times the most
// micro-batches in flight in the schedule, plus one micro-batch's values that die within its
// forward pass (all of them: an upper bound, since F frees each after its last reader) and the
// fused head's chunk of logits (kernels/lm_head_loss.h). Float32 throughout; the micro-batch is taken as one sequence of
// micro_batch_tokens tokens (document count does not change the big tensors).
#pragma once

#include <cstdint>
#include <string>

#include "hspmd/specialize/exec_graph.h"

namespace hspmd::specialize {

struct MemoryEstimateOptions {
  int64_t micro_batch_tokens = 0;
  int micro_batches_in_flight = 1;
  // ZeRO-3's gradients reduced on the communication thread while the backward pass goes on: B
  // computes one whole gradient while the thread reduces the one before (two at once, not one).
  bool gradients_reduced_on_a_thread = true;
};

struct MemoryEstimate {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_states = 0;
  int64_t activations = 0;
  int64_t total() const { return parameters + gradients + optimizer_states + activations; }
  std::string to_string() const;
  friend bool operator==(const MemoryEstimate&, const MemoryEstimate&) = default;
};

MemoryEstimate estimate_memory(const ExecGraph& exec, const MemoryEstimateOptions& options);

}  // namespace hspmd::specialize
