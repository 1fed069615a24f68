// The plans one rank of a run has specialized, kept for the run: each annotation plan is
// specialized (executable graph, pipelines, schedule, memory estimate, the layouts of the training
// state) once, its communicators are connected once, and a switch back to it costs only the move of
// the state. The cache is keyed by the plan's JSON text with the run's recomputation added.
//
//   PlanCache plans(graph, rank, {.schedule = k1F1B, .seq_len = 256, .device = dev}, session, cache);
//   SpecializedPlan& p = plans.find_or_build(plan, "tp2-pp2", members);   // collective when built
//   p.exec->forward_ops(); p.schedule; p.param_layouts[i].state ...
//
// Specializing never communicates and throws Error when the plan is invalid for this rank or exceeds
// its memory; connecting is collective (every member walks one sorted list of groups), so the first
// step does not pay for connecting and an unreachable peer fails before training.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hspmd/graph/graph.h"
#include "hspmd/models/model.h"
#include "hspmd/resolve/resolver.h"
#include "hspmd/runtime/emulation.h"
#include "hspmd/runtime/reshard_exec.h"
#include "hspmd/sharding/plan.h"
#include "hspmd/specialize/exec_graph.h"
#include "hspmd/specialize/gather_units.h"
#include "hspmd/specialize/memory_estimate.h"
#include "hspmd/specialize/pipeline_layout.h"
#include "hspmd/specialize/schedule.h"
#include "hspmd/switching/switch_plan.h"

namespace hspmd::runtime {

// One annotation plan as this rank runs it.
struct SpecializedPlan {
  std::string name;
  std::unique_ptr<specialize::ExecGraph> exec;
  bool active = false;  // this rank holds state and is fed data under the plan (else: a spare)
  std::vector<std::vector<graph::TensorRef>> forward_releases;   // ExecGraph::forward_releases
  std::vector<std::vector<graph::TensorRef>> backward_releases;  // ExecGraph::backward_releases
  specialize::PipelineLayout pipelines;    // where every rank sits in the plan's pipelines
  std::vector<specialize::Task> schedule;  // this rank's; empty on a spare
  specialize::MemoryEstimate memory;
  std::vector<switching::ParamLayout> param_layouts;   // every parameter, this rank's or not
  std::vector<sharding::Annotation> grad_annotations;  // per parameter, as B leaves its gradient
  // ZeRO-3: the units F (forward_ops) and B (backward_steps) gather; empty under other stages.
  std::vector<specialize::GatherUnit> forward_gathers, backward_gathers;
};

struct PlanCacheOptions {
  specialize::ScheduleKind schedule = specialize::ScheduleKind::k1F1B;
  int64_t seq_len = 256;   // tokens of a packed row: micro-batch shapes of the memory estimate and connections
  bool recompute = false;  // the command line's per-layer recomputation, added to every plan's own
  EmulatedDevice device;   // this rank's memory capacity (0: unbounded)
  bool gradients_reduced_on_a_thread = true;  // overlap on (the memory estimate's ZeRO-3 gradients)
};

class PlanCache {
 public:
  // `model`, `session` and `resolutions` must outlive the cache.
  PlanCache(const models::ModelGraph& model, int rank, PlanCacheOptions options, CommSession& session,
            resolve::ResolveCache& resolutions);

  // The plan as run: the command line's recompute added. Its JSON text keys the cache.
  sharding::AnnotationPlan effective(const sharding::AnnotationPlan& plan) const;
  // nullptr: not specialized yet.
  SpecializedPlan* find(const sharding::AnnotationPlan& effective);
  // Specializes an effective plan for this rank, with no communication; Error when it is invalid
  // or exceeds this rank's memory.
  std::unique_ptr<SpecializedPlan> specialize(const sharding::AnnotationPlan& effective, const std::string& name) const;
  // Collective over `members`: connects the plan's groups, then keeps it.
  SpecializedPlan& keep(std::unique_ptr<SpecializedPlan> plan, const std::vector<int>& members);
  // Collective over `members`: every communicator a step of `plan` uses (after a failure the groups
  // are new; otherwise nothing is connected twice).
  void connect(const SpecializedPlan& plan, const std::vector<int>& members);
  // Collective: the kept plan, connected, or specialized, connected and kept now.
  SpecializedPlan& find_or_build(const sharding::AnnotationPlan& plan, const std::string& name,
                                 const std::vector<int>& members);
  int size() const { return static_cast<int>(plans_.size()); }

 private:
  const models::ModelGraph& model_;
  int rank_;
  PlanCacheOptions options_;
  CommSession& session_;
  resolve::ResolveCache& resolutions_;
  std::map<std::string, std::unique_ptr<SpecializedPlan>> plans_;  // by the effective plan's JSON text
};

}  // namespace hspmd::runtime
