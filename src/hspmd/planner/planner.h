// Planner: writes a (possibly heterogeneous) strategy for a model on a cluster from a profile, by
// the two-level optimization of the paper's Appendix A.1, with the cost model as the objective.
//
//   Planner planner(*load_model("configs/llama-32b.json"), topology, profile,
//                   {.global_batch = 64, .seq_len = 4096});
//   Plan plan = planner.plan();          // Error with the figures when nothing fits in memory
//   plan.strategy.to_json_text();        // a strategy file `hspmd train --strategy` accepts
//   plan.prediction.step_seconds;
//
// Level 1, the pipeline configuration (number of pipelines, stages, TP degree and devices per
// stage), is a search with pruning: planner/pipeline_search.h. Candidates are visited in order of a
// lower bound on their step time, and the search stops once the bound reaches the best plan found.
// Level 2, per candidate, finds the layers per stage and the micro-batches per pipeline as integer
// programs (COIN-OR CBC): planner/layer_programs.h.
// Each candidate's solution is priced by CostModel::predict, which picks the plan.
//
// Re-planning (elastic training): replan(previous, available) plans on the available ranks only
// and, among plans within `replan_tolerance` of the fastest, keeps the one whose ranks must fetch
// the fewest bytes of parameters and optimizer states they did not hold in `previous`. To answer
// within a second at 48 devices it prunes level 1 with the previous plan: each device kind keeps
// its TP degrees (or stays idle; kinds new to the cluster are searched) and the micro-batch sizes
// are the previous ones.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hspmd/models/model.h"
#include "hspmd/planner/cost_model.h"
#include "hspmd/planner/profile.h"
#include "hspmd/resolve/topology.h"
#include "hspmd/sharding/strategy.h"

namespace hspmd::planner {

struct LayerProgramsShared;  // planner/layer_programs.h

// What a long search is doing, handed to PlannerOptions::progress every progress_interval_seconds.
struct PlanningProgress {
  double elapsed_seconds = 0;
  double time_limit_seconds = 0;     // 0: none
  int64_t cuts = 0;                  // level 1: ways to cut the kinds into TP groups
  int64_t shapes = 0;                // level 1: (cut, pipeline count) shapes expanded
  int64_t candidates = 0;            // level 1: pipeline configurations generated
  int solved = 0;                    // level 2: configurations taken (layers, micro-batches)
  int relaxation_pruned = 0;         // level 2: of them, dropped by a relaxation before any program
  int milps = 0;                     // level 2: integer programs solved by CBC
  int floor_skipped = 0;             // level 2: solutions not priced, their floor above the best plan
  double best_step_seconds = 0;      // the best plan's predicted step; infinity: none fits yet
  double lowest_bound_seconds = 0;   // the lowest bound among what is left to search
  std::string to_string() const;     // one line
};

struct PlannerOptions {
  int64_t global_batch = 64;  // sequences per step
  int64_t seq_len = 4096;
  bool zero1 = true;
  // Under ZeRO-1, when memory binds (see zero3_when_tight), plan again with ZeRO-2's memory (no whole
  // gradient accumulator between backward passes, docs/memory.md) and write "zero": 2 if faster.
  bool zero2_when_tight = true;
  // Price memory as ZeRO-2 (with zero1) and write "zero": 2: what that second search sets.
  bool zero2 = false;
  // Price TP stages' memory with sequence parallelism in the search and write "sequence_parallel":
  // true on them; the planner sets it whenever search_sequence_parallel holds (SP is never slower
  // nor larger). Each solution is also priced with SP off, and SP kept only where it fits when the
  // other does not, or is faster.
  bool sequence_parallel = false;
  // Whether sequence parallelism is considered at all (both of the above); false: never written.
  bool search_sequence_parallel = true;
  // Price memory and the per-layer parameter gathers as ZeRO-3 and write "zero": 3 where the runtime
  // runs it: every pipeline runs as many micro-batches (level 2 gives each B / sum_p b_p), and the
  // holders of each parameter run their passes in one order under `schedule` (GPipe always; 1F1B
  // when each layer sits equally far from the ends of its pipelines). Pipelines may otherwise differ
  // in stages, layer splits, TP and CP degrees.
  bool zero3 = false;
  // When memory binds (no plan fits, or a configuration whose bound is below the best plan found did
  // not fit), search again with less memory, keeping the fastest plan: ZeRO-2
  // (zero2_when_tight), then ZeRO-3 (this); each step only with zero1 for the ZeRO stages. The
  // searches share level 2's work that memory does not change (LayerProgramsShared).
  bool zero3_when_tight = true;
  specialize::ScheduleKind schedule = specialize::ScheduleKind::k1F1B;
  // The runtime's gradient buckets the plan will train with (--grad-bucket-mb): how much of the
  // gradient sync the cost model hides behind backward passes (CostOptions::grad_bucket_mb).
  double grad_bucket_mb = 25;
  std::vector<int> micro_batch_sizes;  // empty: powers of two up to 8 dividing the global batch
  std::vector<int> devices;            // the ranks the plan may use; empty: every device of the cluster
  std::map<std::string, int> tp_per_kind;  // fixes a kind's TP degree (or idle); absent kinds: searched
  // Context-parallel degrees to search (docs/context-parallelism.md): each cut takes one for all its
  // stages, a stage of t x c devices inside a node. Empty: searched_cp_degrees decides by seq_len.
  std::vector<int> cp_degrees;
  double replan_tolerance = 0.05;      // replan(): plans this much slower than the fastest may win on movement
  std::string name = "planned";        // the strategy's name
  // Stop searching after this many seconds (0: no limit) and return the best plan found so far,
  // marked incomplete (Plan::complete); without any plan by then, the search goes on to the first.
  double time_limit_seconds = 0;
  // Called every progress_interval_seconds of a search still running (none: silent).
  std::function<void(const PlanningProgress&)> progress;
  double progress_interval_seconds = 5;
};

// Sequences from this many tokens on are long: the planner searches CP degrees for them unprompted.
inline constexpr int64_t kLongSequenceTokens = 8192;

// The CP degrees the search tries: options.cp_degrees when given; otherwise 1, 2, 4 and 8 for long
// sequences (seq_len >= kLongSequenceTokens) and 1 alone below. Why not always: below 8K tokens
// (the paper's runs use 4K) data parallelism already keeps the devices busy with sequences of their
// own and CP buys little (1.5% on the paper's 48-GPU 32B case, docs/planner.md), while every degree
// is a further set of cuts to search; there CP is asked for. Degrees whose groups exceed a node's
// devices yield no cut.
std::vector<int> searched_cp_degrees(const PlannerOptions& options);

struct Plan {
  sharding::Strategy strategy;
  Prediction prediction;
  std::vector<std::string> idle;  // "rank 15 (H800): ..." why each usable rank is left out
  int candidates = 0;             // level-1 candidates generated
  int candidates_solved = 0;      // of them, solved at level 2 (the rest pruned by the bound)
  int milps = 0;                  // integer programs solved by CBC
  double moved_bytes = 0;         // replan(): state the ranks fetch (0 for plan())
  double planning_seconds = 0;
  // False when the time limit stopped the search: a configuration left unsearched had a lower bound
  // than this plan's step (lowest_bound_left), so a faster plan may exist.
  bool complete = true;
  double lowest_bound_left = 0;
};

class Planner {
 public:
  // Keeps references: topology and profile must outlive the planner (the model need not: the
  // cost model keeps its sizes).
  Planner(const models::Model& model, const resolve::Topology& topology, const Profile& profile,
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
  // The fastest plan below `prune_at` (a plan already found elsewhere); step_seconds infinity: none.
  // `shared`: level 2's work a search under another ZeRO stage did (none: this is the first).
  Plan run(const std::vector<int>& devices, const sharding::Strategy* previous,
           double prune_at = std::numeric_limits<double>::infinity(),
           std::shared_ptr<LayerProgramsShared> shared = nullptr) const;
  // The next setting that needs less memory (SP, ZeRO-2, ZeRO-3), or none.
  std::optional<PlannerOptions> tighter() const;

  const resolve::Topology& topology_;
  const Profile& profile_;
  PlannerOptions options_;
  CostModel cost_;
};

// "48 ranks, 4 pipelines; step 1.234 s predicted; ..." followed by one line per pipeline.
std::string describe_plan(const Plan& plan);

}  // namespace hspmd::planner
