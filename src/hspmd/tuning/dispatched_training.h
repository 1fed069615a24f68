// Training with dispatch by length and strategies per maximum length: drives a DistTrainer
// (runtime/dist_trainer.h) with the decisions of a DispatchAhead (planner/dispatch_ahead.h), so it
// sits above both (the planner decides without the runtime). Before each step it takes the step's
// decision, switches the trainer (one fused BSR) when the decision picks another strategy, and the
// trainer's split hook hands each pipeline the sequences the dispatcher gave it. Loss and gradients stay normalized by the global batch, so a step equals the
// single-process step on the same batch whatever the dispatch (architecture §9).
//
//   DispatchedTraining run(strategies);
//   size_t first = run.first_strategy(dataset, train_options, {});
//   DistOptions o{...}; run.install(o);
//   DistTrainer t(config, dataset, strategies.plan(first), o, rank, world, groups);
//   run.start(dataset, train_options, t.loader_state(), first, t.step_count() + 1);
//   while (!t.done()) { auto switched = run.before_step(t); t.step(); }
#pragma once

#include <memory>
#include <optional>

#include "hspmd/planner/dispatch_ahead.h"
#include "hspmd/planner/length_strategies.h"
#include "hspmd/runtime/dist_trainer.h"

namespace hspmd::tuning {

class DispatchedTraining {
 public:
  // The strategies must outlive this object. `depth`: decisions computed ahead of the trainer.
  explicit DispatchedTraining(const planner::LengthStrategies& strategies, int depth = 2);

  // The strategy chosen for the next batch of a loader at `state` with nothing in force: the
  // trainer is built under it, so the first step needs no switch.
  size_t first_strategy(const data::TokenDataset& dataset, const runtime::TrainerOptions& options,
                        const data::LoaderState& state) const;
  // Sets the trainer options' split_batch to this object's current decision.
  void install(runtime::DistOptions& options);
  // Starts deciding from the trainer's data position; `in_force` is the trainer's strategy.
  void start(const data::TokenDataset& dataset, const runtime::TrainerOptions& options,
             const data::LoaderState& state, size_t in_force, int64_t next_step);
  // Takes the next step's decision and switches the trainer when it picks another strategy (the
  // report of the switch). A refused switch is an Error: the decisions ahead assume it happened.
  std::optional<runtime::SwitchReport> before_step(runtime::DistTrainer& trainer);

  const planner::DispatchDecision& decision() const;  // the current step's
  size_t in_force() const { return in_force_; }
  int switches() const { return switches_; }

 private:
  const planner::LengthStrategies& strategies_;
  int depth_;
  size_t in_force_ = 0;
  int switches_ = 0;
  std::unique_ptr<planner::DispatchAhead> ahead_;
  std::optional<planner::DispatchDecision> current_;
};

}  // namespace hspmd::tuning
