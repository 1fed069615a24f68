// ZeRO-3's parameter gathers during one pass (sharding::AnnotationPlan::shard_parameters). A rank
// keeps only its shard of each parameter's master weights (TensorState::value, in the
// optimizer-state layout); the pass's ops read the parameter in its own annotation
// (TensorState::read_annotation). The pass follows its units' schedule (specialize/gather_units.h):
// a decoder layer's parameters are all-gathered before their first reader, or already at the
// previous layer's last reader (one layer ahead), and each is freed after its own last reader. The
// gather is the resolution state -> read layout that ZeRO-1/2 run after the update (AG, or SplitAG /
// BSR), executed by execute_reshard_staged on the `post` channel's communicators: every holder of a
// parameter gathers it as many times and in the same order, since ZeRO-3's pipelines, of any shape,
// run as many micro-batches (sharding::Strategy::validate) and its holders run their passes in one
// order (specialize::check_passes_in_lockstep).
//
//   ParameterGathers gathers(plan.forward_gathers, state, params, gather_one);
//   for (int k = 0; k < ops.size(); ++k) {
//     gathers.before(k, values);   // values[param op] = {the gathered parameter}
//     run_op(ops[k]);
//     gathers.after(k, values);    // values[param op] = {} after its last reader
//   }
#pragma once

#include <functional>
#include <map>
#include <vector>

#include "hspmd/core/tensor.h"
#include "hspmd/graph/graph.h"
#include "hspmd/runtime/training_state.h"
#include "hspmd/specialize/gather_units.h"

namespace hspmd::runtime {

class ParameterGathers {
 public:
  // The whole parameter in its read layout from this rank's shard (collective over its holders).
  using Gather = std::function<Tensor(const TensorState&)>;

  // `units` (the pass's, in order of first reader) must outlive this; `params`: the model's
  // parameters (TensorState::param indexes them).
  ParameterGathers(const std::vector<specialize::GatherUnit>& units, const ShardedState& state,
                   const std::vector<graph::TensorRef>& params, Gather gather);

  // `values`: the pass's values by op id, [op][output].
  void before(int position, std::vector<std::vector<Tensor>>& values);
  void after(int position, std::vector<std::vector<Tensor>>& values);

 private:
  const std::vector<specialize::GatherUnit>& units_;
  std::map<int, const TensorState*> by_op_;  // parameter op id -> its state
  std::map<int, std::vector<int>> frees_;    // position -> the parameter ops freed after it
  Gather gather_;
  size_t gathered_ = 0;  // units [0, gathered_) have been gathered (the freed ones included)
};

}  // namespace hspmd::runtime
