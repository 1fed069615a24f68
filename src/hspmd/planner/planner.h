// Planner: writes a (possibly heterogeneous) strategy for a model on a cluster from a profile, by
// the two-level optimization of the paper's Appendix A.1, with the cost model as the objective.
//
//   Planner planner(config, topology, profile, {.global_batch = 64, .seq_len = 4096});
//   Plan plan = planner.plan();          // Error with the figures when nothing fits in memory
//   plan.strategy.to_json_text();        // a strategy file `hspmd train --strategy` accepts
//   plan.prediction.step_seconds;
//
// Level 1, pipeline configuration (a search with pruning). A candidate fixes
//   - per device kind: its TP degree t (a power of two dividing the heads, KV heads, hidden size,
//     FFN size and vocabulary, profiled for the kind), or the kind left idle. TP groups are t
//     consecutive devices of the kind inside one node (TP never crosses a node); devices of a node
//     that do not make up a whole group stay idle;
//   - the number of pipelines D; each kind's groups are spread over the pipelines as evenly as
//     possible (pipelines may differ by one group of a kind: heterogeneous pipelines): every such
//     spread on clusters of up to 8 devices, one rotation (extras of different kinds on different
//     pipelines) or at most 16 spreads above;
//   - the order of the kinds along every pipeline (e.g. H20 stages first, then H800);
//   - one micro-batch size b for all pipelines (a power of two dividing the global batch).
// Candidates are visited in order of a lower bound on their step time (all layer work spread
// over every group's speed), and the search stops once the bound reaches the best plan found.
// Level 2, per candidate (integer programs, COIN-OR CBC):
//   (a) layers per stage, per pipeline and micro-batch count n: integer x_j >= 1, sum x_j = layers,
//       each stage's predicted memory <= its device memory, minimizing
//       sum_j f_j + (n - 1) max_j f_j + max_j (gradient sync_j + optimizer_j)   (f_j linear in x_j).
//       For every n at or above the stage count (where 1F1B's memory no longer depends on n) the
//       best split is a line in n; the lower envelope of those lines is found exactly with a few
//       solves at their crossing points (each solve at a real-valued n).
//   (b) micro-batches per pipeline: binaries y_{p,n} (pipeline p runs n micro-batches), one per
//       pipeline, sum n y_{p,n} = global batch / b, minimizing the slowest pipeline. Each
//       pipeline's window of n is narrowed first, exactly: pipeline times grow with n, so the
//       optimum's threshold T* (the least time at which the pipelines can take every micro-batch)
//       bounds every count.
// Each candidate's solution is priced by CostModel::predict, which picks the plan.
//
// Re-planning (elastic training): replan(previous, available) plans on the available ranks only
// and, among plans within `replan_tolerance` of the fastest, keeps the one whose ranks must fetch
// the fewest bytes of parameters and optimizer states they did not hold in `previous`. To answer
// within a second at 48 devices it prunes level 1 with the previous plan: each device kind keeps
// its TP degree (or stays idle; kinds new to the cluster are searched) and the micro-batch sizes
// are the previous ones.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hspmd/models/llama_config.h"
#include "hspmd/planner/cost_model.h"
#include "hspmd/planner/profile.h"
#include "hspmd/resolve/topology.h"
#include "hspmd/sharding/strategy.h"

namespace hspmd::planner {

struct PlannerOptions {
  int64_t global_batch = 64;  // sequences per step
  int64_t seq_len = 4096;
  bool zero1 = true;
  specialize::ScheduleKind schedule = specialize::ScheduleKind::k1F1B;
  std::vector<int> micro_batch_sizes;  // empty: powers of two up to 8 dividing the global batch
  std::vector<int> devices;            // the ranks the plan may use; empty: every device of the cluster
  std::map<std::string, int> tp_per_kind;  // fixes a kind's TP degree (or idle); absent kinds: searched
  double replan_tolerance = 0.05;      // replan(): plans this much slower than the fastest may win on movement
  std::string name = "planned";        // the strategy's name
};

struct Plan {
  sharding::Strategy strategy;
  Prediction prediction;
  std::vector<std::string> idle;  // "rank 15 (H800): ..." why each usable rank is left out
  int candidates = 0;             // level-1 candidates generated
  int candidates_solved = 0;      // of them, solved at level 2 (the rest pruned by the bound)
  int milps = 0;                  // integer programs solved by CBC
  double moved_bytes = 0;         // replan(): state the ranks fetch (0 for plan())
  double planning_seconds = 0;
};

class Planner {
 public:
  // Keeps references: topology and profile must outlive the planner.
  Planner(const models::LlamaConfig& config, const resolve::Topology& topology, const Profile& profile,
          PlannerOptions options);

  // The fastest plan found. Error when no candidate fits in memory, with the model's and the
  // devices' memory figures.
  Plan plan() const;
  // Plan on `available` ranks (survivors and newcomers), preferring little state movement.
  Plan replan(const sharding::Strategy& previous, const std::vector<int>& available) const;

  // Bytes of parameters and optimizer states the ranks of `next` must receive because they did
  // not hold those layers (at that shard) in `previous`.
  double moved_bytes(const sharding::Strategy& previous, const sharding::Strategy& next) const;

  const CostModel& cost_model() const { return cost_; }

 private:
  struct Search;
  Plan run(const std::vector<int>& devices, const sharding::Strategy* previous) const;

  models::LlamaConfig config_;
  const resolve::Topology& topology_;
  const Profile& profile_;
  PlannerOptions options_;
  CostModel cost_;
};

// "48 ranks, 4 pipelines; step 1.234 s predicted; ..." followed by one line per pipeline.
std::string describe_plan(const Plan& plan);

}  // namespace hspmd::planner
