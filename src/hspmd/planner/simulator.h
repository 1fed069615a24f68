// The simulator: replays a run's trace (planner/run_trace.h: steps, each step's batch, ranks lost
// and returned between steps) on a cluster with the cost model, without running anything, and
// predicts what each policy of reacting to it costs (the paper's Figures 16-18, on paper):
//
//   Simulator sim(*load_model("configs/llama-32b.json"), topology, profile, RunTrace::from_file(...));
//   std::vector<PolicyRun> runs = sim.planner_runs();          // the planner's choices
//   runs.push_back(sim.fixed_run(Strategy::from_file("table12-c4-16h800-32h20.json")));
//   std::cout << comparison_table(runs);
//
// Each step costs the cost model's prediction for the strategy in force: CostModel::predict's step
// for batches of one length, the dispatcher's for mixed lengths (planner/dispatcher.h: the batch's
// sequences over the strategy's pipelines). Events happen between steps. Moving state from one
// strategy to another costs the fused BSR the trainer would run (switching::plan_switch over every
// parameter and both AdamW moments, dead ranks sending nothing, parameters taken from their
// optimizer-state layout after a loss: runtime/dist_trainer_switch.cc), priced by bsr_seconds
// (planner/switch_seconds.h). When some slice has no surviving copy (a ZeRO-1 shard of the moments,
// a stage without a replica), the run restores the trace's checkpoint instead (docs/elastic.md):
// restore_seconds plus the steps since the last checkpoint run again under the new strategy.
// Planning time is not counted (it is host-dependent; the log prints it).
//
// Policies:
//   planner (batches of one length): the planner's plan on every rank, re-planned with
//     Planner::replan at every event that takes a rank of the plan away or returns ranks, with the
//     elastic trainer's settings (ZeRO-1 off so that replicas can serve a loss, cli/train_dist.cc).
//   planner (mixed lengths): the mixed-length planner (planner/mixed_length_planner.h) on the trace's
//     length distribution gives two runs: its heterogeneous strategy (each batch dispatched over its
//     pipelines), and its strategies per maximum length, one chosen per batch counting the switch
//     (planner/length_strategies.h).
//   fixed strategy S: keeps S. After a loss it drops every pipeline that lost a rank (as data-
//     parallel training without re-planning can: the survivors hold whole replicas) and spreads the
//     global batch over the remaining pipelines in proportion to their original shares, each rounded
//     up to whole micro-batches; when ranks return, the pipelines whose ranks are all back rejoin.
//     No pipeline left whole stops the run (a real run waits for a restart of its whole shape).
//   strategies per maximum length (given): one chosen per batch as above (mixed lengths).
// A trace with both events and mixed lengths is refused (the mixed-length planner does not re-plan).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hspmd/models/model.h"
#include "hspmd/core/shape.h"
#include "hspmd/planner/cost_model.h"
#include "hspmd/planner/dispatcher.h"
#include "hspmd/planner/length_strategies.h"
#include "hspmd/planner/profile.h"
#include "hspmd/planner/run_trace.h"
#include "hspmd/resolve/topology.h"
#include "hspmd/sharding/strategy.h"

namespace hspmd::planner {

struct SimulatorOptions {
  double replan_tolerance = 0.05;  // PlannerOptions::replan_tolerance
  int methods_per_interval = 2;    // MixedLengthOptions::methods_per_interval
};

struct PolicyRun {
  std::string name;
  int64_t steps = 0;              // steps trained (all of the trace's unless `stopped`)
  double tokens = 0;              // tokens of those steps
  double step_seconds = 0;        // the steps' predicted time
  double switch_seconds = 0;      // moving state between strategies (fused BSRs)
  double recovery_seconds = 0;    // checkpoint restores and the steps run again
  int switches = 0, restores = 0;
  std::string stopped{};          // why the run could not go on; empty: it trained every step
  std::vector<std::string> log{}; // one line per strategy change

  double total_seconds() const { return step_seconds + switch_seconds + recovery_seconds; }
  double tokens_per_second() const { return total_seconds() > 0 ? tokens / total_seconds() : 0; }
};

class Simulator {
 public:
  // Keeps references to the model, topology and profile (they must outlive the simulator), copies the
  // trace. Error for a trace with both events and mixed lengths.
  Simulator(const models::Model& model, const resolve::Topology& topology, const Profile& profile,
            const RunTrace& trace, SimulatorOptions options = {});

  // One run for batches of one length, two for mixed lengths (the header). Error when the planner
  // finds no plan at the start.
  std::vector<PolicyRun> planner_runs() const;
  // Error when a trace of one length has another global batch than the strategy's.
  PolicyRun fixed_run(const sharding::Strategy& strategy) const;
  // Mixed lengths only.
  PolicyRun length_set_run(std::vector<LengthStrategy> set, const std::string& name) const;

  // Predicted seconds of moving every parameter and both moments from `from` to `to` with `dead`
  // sending nothing; none when some slice has no surviving copy.
  std::optional<double> move_seconds(const sharding::Strategy& from, const sharding::Strategy& to,
                                     const std::vector<int>& dead) const;
  // Predicted seconds of step `step` under `strategy`; Error (naming the strategy) when it does not
  // fit in memory or cannot hold the batch.
  double step_seconds(const sharding::Strategy& strategy, int64_t step) const;

  const CostModel& cost_model() const { return cost_; }

 private:
  // A strategy with what its steps cost: one figure for batches of one length, its pipelines'
  // models for dispatching mixed lengths (computed once per strategy, not per step).
  struct Priced {
    sharding::Strategy strategy;
    double uniform_seconds = 0;
    std::vector<PipelineModel> pipelines{};
  };
  Priced price(const sharding::Strategy& strategy) const;
  double seconds(const Priced& priced, int64_t step) const;
  // Given the strategy in force and the ranks available after an event, the next strategy.
  using React = std::function<sharding::Strategy(const sharding::Strategy&, const std::vector<int>&)>;
  PolicyRun replay(const std::string& name, const sharding::Strategy& initial, const React& react) const;

  const models::Model& model_;
  const resolve::Topology& topology_;
  const Profile& profile_;
  RunTrace trace_;
  SimulatorOptions options_;
  CostModel cost_;
  std::vector<std::pair<std::string, Shape>> parameters_;
};

// The fixed rule's strategy on `available` ranks (the header): S's pipelines whose ranks are all
// available, sharing `global_batch` sequences (0: keep every pipeline's micro-batches). Error naming S
// when no pipeline is whole.
sharding::Strategy surviving_pipelines(const sharding::Strategy& strategy, const std::vector<int>& available,
                                       int64_t global_batch);

// A table of the runs: steps, total predicted time, tokens/s, time in steps, switches and
// recovery, each relative to the first run's throughput.
std::string comparison_table(const std::vector<PolicyRun>& runs);
// The same as JSON (with each run's log), for scripts.
std::string comparison_json(const RunTrace& trace, const std::vector<PolicyRun>& runs);

}  // namespace hspmd::planner
