// ZeRO-3's parameter gathers during one pass (sharding::AnnotationPlan::shard_parameters). A rank
// keeps only its shard of each parameter's master weights (TensorState::value, in the
// optimizer-state layout); the pass's ops read the parameter in its own annotation
// (TensorState::read_annotation). The pass follows its units' schedule (specialize/gather_units.h):
// a decoder layer's gather is handed to the communication thread at its gather point (at the
// previous layer's last reader: one layer ahead), the pass waits for it only at the layer's first
// reader, and frees each parameter after its own last reader. The gather is the resolution
// state -> read layout that ZeRO-1/2 run after the update (AG, or SplitAG / BSR), executed by
// execute_reshard_staged on the thread's (`grad` channel's) communicators: every holder of a
// parameter gathers it as many times and in the same order, since ZeRO-3's pipelines, of any shape,
// run as many micro-batches (sharding::Strategy::validate) and its holders run their passes in one
// order (specialize::check_passes_in_lockstep); and each rank's thread runs the gathers in the
// order of their gather points, behind the gradient reductions B handed over before them
// (runtime/bucketed_gradient_sync.h).
//
//   ParameterGathers gathers(plan.forward_gathers, state, params, gather_one, queue);
//   for (int k = 0; k < ops.size(); ++k) {
//     gathers.before(k, values);   // hands the units due to the thread; waits for values[param op]
//     run_op(ops[k]);
//     gathers.after(k, values);    // values[param op] = {} after its last reader
//   }
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "hspmd/core/tensor.h"
#include "hspmd/graph/graph.h"
#include "hspmd/runtime/training_state.h"
#include "hspmd/specialize/gather_units.h"

namespace hspmd::runtime {

// Where the gathers run: `submit` queues a job (after what the caller queued before) and returns
// its ticket, `wait` returns once that job has run (throwing its error).
struct GatherQueue {
  std::function<uint64_t(std::function<void()>)> submit;
  std::function<void(uint64_t)> wait;
};

class ParameterGathers {
 public:
  // The whole parameter in its read layout from this rank's shard (collective over its holders).
  // Runs on the queue's thread.
  using Gather = std::function<Tensor(const TensorState&)>;

  // `units` (the pass's, in order of first reader) must outlive this; `params`: the model's
  // parameters (TensorState::param indexes them).
  ParameterGathers(const std::vector<specialize::GatherUnit>& units, const ShardedState& state,
                   const std::vector<graph::TensorRef>& params, Gather gather, GatherQueue queue);

  // `values`: the pass's values by op id, [op][output].
  void before(int position, std::vector<std::vector<Tensor>>& values);
  void after(int position, std::vector<std::vector<Tensor>>& values);

 private:
  // A unit handed to the thread: its gathered parameters land in `gathered` (in the unit's order).
  struct Pending {
    uint64_t ticket = 0;
    std::shared_ptr<std::vector<Tensor>> gathered;  // shared with the job, which may outlive a failed pass
  };

  const std::vector<specialize::GatherUnit>& units_;
  std::vector<const TensorState*> states_;  // per unit parameter, flattened in unit order
  std::vector<size_t> first_state_;         // per unit: its first entry in states_
  std::map<int, std::vector<int>> frees_;   // position -> the parameter ops freed after it
  Gather gather_;
  GatherQueue queue_;
  std::vector<Pending> pending_;  // per unit
  size_t submitted_ = 0;          // units [0, submitted_) have been handed to the thread
  size_t received_ = 0;           // units [0, received_) are in the pass's values (or freed)
};

}  // namespace hspmd::runtime
