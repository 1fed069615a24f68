// Planning a graph switch (§7, Figure 14): the state that moves when training goes from one
// annotation plan to another, and the one fused BSR that moves it. `hspmd explain --switch` prints
// the plan; the distributed trainer (runtime/dist_trainer.h) executes it, so the two agree byte
// for byte.
//
//   std::vector<ParamLayout> a = param_layouts(plan_a, params), b = param_layouts(plan_b, params);
//   SwitchPlan s = plan_switch(a, b, {.optimizer_states = true, .topology = &topo});
//   s.bsr.ops[3]                    // device 3: LocalCopy ..., Send peer=0 ..., Recv peer=5 ...
//   s.sent_by_tier[kInterNode]      // bytes over inter-node links
//
// What moves: every parameter with its own annotation (under ZeRO-3 its optimizer-state one: the
// master weights are kept sharded), and (optimizer_states) AdamW's two moments
// with the optimizer-state annotation (the ZeRO-1 shard when the plan shards it). All are float32
// (master weights and moments), unless SwitchOptions::value_element_size says the values move as
// bf16. The tensors are listed parameter by parameter in the order of switching/state_parts.h
// (value, exp_avg, exp_avg_sq), which is the index order of SwitchPlan::bsr's pieces;
// SwitchPlan::tensor_index names that order.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hspmd/core/shape.h"
#include "hspmd/resolve/fused_bsr.h"
#include "hspmd/resolve/topology.h"
#include "hspmd/sharding/annotation.h"
#include "hspmd/sharding/plan.h"
#include "hspmd/switching/state_parts.h"

namespace hspmd::switching {

// One parameter under one plan; ZeRO flags cleared (the layouts of the values themselves).
struct ParamLayout {
  std::string name;
  Shape shape;
  sharding::Annotation value;  // the parameter's master weights (== state under ZeRO-3)
  sharding::Annotation state;  // its optimizer state (== value without ZeRO-1)
  // Where the passes read it: value, or under ZeRO-3 the tensor's annotation, all-gathered from
  // value per layer (runtime/parameter_gathers.h). A switch does not move it.
  sharding::Annotation read;
};

// The layouts of `params` (name, global shape) under `plan`; Error naming a parameter the plan
// does not annotate.
std::vector<ParamLayout> param_layouts(const sharding::AnnotationPlan& plan,
                                       const std::vector<std::pair<std::string, Shape>>& params);

// Every rank a plan places state on, ascending.
std::vector<int> ranks_of(const std::vector<ParamLayout>& layouts);

struct SwitchOptions {
  bool optimizer_states = true;                // move AdamW's moments too
  const resolve::Topology* topology = nullptr;  // nullptr: one host, all links equal
  resolve::BsrAlgorithm algorithm = resolve::BsrAlgorithm::kFusedHeuristic;  // resolve/fused_bsr.h
  std::vector<int> dead{};                     // ranks that cannot send (failed)
  // Bytes per element of the parameter values on the wire: 4 (float32 master weights), or 2 when
  // only their bf16 compute copy moves (switching/bf16_switch_plan.h). The moments are float32.
  int64_t value_element_size = 4;
};

struct SwitchPlan {
  std::vector<resolve::FusedTensor> tensors;  // the BSR's tensor list (see above)
  resolve::FusedBsr bsr;
  std::map<resolve::LinkTier, int64_t> sent_by_tier;            // bytes on the wire per link tier
  std::map<int, std::map<resolve::LinkTier, int64_t>> sent_by;  // sender -> tier -> bytes
  int64_t local_copy_bytes = 0;                                 // slices the receiver already held
  int64_t busiest_sender_bytes = 0;
  bool optimizer_states = true;  // the moments are listed too (SwitchOptions::optimizer_states)

  // Where `part` of parameter `param` (its index in the layouts) sits in `tensors`.
  size_t tensor_index(size_t param, StatePart part) const;
};

// Error naming the parameter when the two lists differ in names or shapes.
SwitchPlan plan_switch(const std::vector<ParamLayout>& from, const std::vector<ParamLayout>& to,
                       const SwitchOptions& options = {});

}  // namespace hspmd::switching
