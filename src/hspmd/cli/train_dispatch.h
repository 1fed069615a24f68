// `hspmd train --strategy-for-max-len L:S.json ... --cluster C.json [--profile P.json]`: distributed
// training with dispatch by length (planner/dispatched_training.h). Each step's batch goes to the
// strategy with the lowest predicted time for it (counting the switch from the one in force), and
// each pipeline of that strategy gets the sequences the dispatcher assigned it. `--dispatch` does
// the same with the one `--strategy` (as a strategy for every length up to --seq-len).
// The cost model needs the cluster (devices, memory, links) and a profile; without --profile, one
// is derived from the cluster's datasheet figures (planner/derived_profile.h), labelled as such.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "hspmd/cli/train_args.h"
#include "hspmd/models/model.h"
#include "hspmd/planner/cost_model.h"
#include "hspmd/planner/length_strategies.h"
#include "hspmd/runtime/training_loop.h"
#include "hspmd/tuning/dispatched_training.h"

namespace hspmd::cli {

// The cost model, the strategies and the decisions of a run, and its training-loop hook: before each
// step, the step's decision (logged) and the switch it asks for.
struct LengthDispatchRun : runtime::TrainingHook {
  explicit LengthDispatchRun(resolve::Topology cluster) : topology(std::move(cluster)) {}

  resolve::Topology topology;
  planner::Profile profile;
  std::unique_ptr<planner::CostModel> cost_model;
  std::unique_ptr<planner::LengthStrategies> strategies;
  std::unique_ptr<tuning::DispatchedTraining> training;
  size_t first = 0;  // the strategy the trainer is built under

  int world() const;  // every rank some strategy uses
  // Lines for the run's header: each strategy, its max length, its pipelines' memory limits and the
  // predicted switches to the others (with bf16-only switches: each step's two moves from the base).
  std::string describe() const;

  void before_step(runtime::TrainingLoop& loop) override;
};

// Whether the arguments ask for dispatch by length.
bool uses_length_dispatch(const TrainArgs& args);
// Error naming the flag at fault (no --cluster, --switch given too, bad MAXLEN:FILE).
std::unique_ptr<LengthDispatchRun> make_length_dispatch(const TrainArgs& args, const models::Model& model);

}  // namespace hspmd::cli
