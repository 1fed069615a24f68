#include "hspmd/tuning/dispatched_training.h"

namespace hspmd::tuning {

using planner::DispatchAhead;
using planner::DispatchDecision;
using planner::LengthStrategies;
using planner::LengthStrategy;

namespace {

data::LoaderOptions loader_options(const runtime::TrainerOptions& o) {
  // The trainer's own loader options (runtime/dist_trainer.cc), so both read the same batches.
  return {.seq_len = o.seq_len, .global_batch_tokens = o.global_batch_tokens, .seed = o.seed};
}

}  // namespace

DispatchedTraining::DispatchedTraining(const LengthStrategies& strategies, int depth)
    : strategies_(strategies), depth_(depth) {}

size_t DispatchedTraining::first_strategy(const data::TokenDataset& dataset, const runtime::TrainerOptions& options,
                                          const data::LoaderState& state) const {
  data::Loader loader(dataset, loader_options(options), state);
  std::vector<int64_t> lengths;
  for (const data::Segment& s : loader.next()) lengths.push_back(static_cast<int64_t>(s.tokens.size()));
  return strategies_.choose(lengths, LengthStrategies::kNone).strategy;
}

void DispatchedTraining::install(runtime::DistOptions& options) {
  options.split_batch = [this](const std::vector<data::Segment>& global) { return decision().split(global); };
}

void DispatchedTraining::start(const data::TokenDataset& dataset, const runtime::TrainerOptions& options,
                               const data::LoaderState& state, size_t in_force, int64_t next_step) {
  in_force_ = in_force;
  current_.reset();
  ahead_ = std::make_unique<DispatchAhead>(dataset, loader_options(options), state, strategies_, in_force, depth_,
                                           next_step);
}

std::optional<runtime::SwitchReport> DispatchedTraining::before_step(runtime::DistTrainer& trainer) {
  HSPMD_CHECK(ahead_) << "dispatched training: before_step() before start()";
  current_ = ahead_->next();
  if (current_->strategy == in_force_) return std::nullopt;
  const LengthStrategy& next = strategies_.at(current_->strategy);
  runtime::SwitchReport report;
  try {
    report = trainer.switch_to(strategies_.plan(current_->strategy), next.strategy.name);
  } catch (const runtime::SwitchRefused& e) {
    throw Error(std::string("strategy ") + next.strategy.name + " (for batches up to " + std::to_string(next.max_len) +
                " tokens) cannot run: " + e.what());
  }
  in_force_ = current_->strategy;
  ++switches_;
  return report;
}

const DispatchDecision& DispatchedTraining::decision() const {
  HSPMD_CHECK(current_.has_value()) << "dispatched training: a step ran without its dispatch decision";
  return *current_;
}

}  // namespace hspmd::tuning
