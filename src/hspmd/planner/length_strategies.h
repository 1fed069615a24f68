// Strategies per maximum length (paper §7 scenario (c), Table 15/16): a run holds a few strategies,
// each prepared for batches whose longest sequence is at most its maximum length, and picks one per
// batch: the one with the lowest predicted time for that batch (its dispatch, planner/dispatcher.h),
// counting the switch from the strategy in force (runtime/dist_trainer.h switch_to).
//
//   LengthStrategies set(model, cost_model, {{4096, a}, {32768, b}}, {.seq_len = 32768});
//   Choice c = set.choose(lengths, /*current=*/0);  // c.strategy, c.dispatch, c.predicted[k]
//
// Switch cost: the bytes of the one fused BSR that moves every parameter and both AdamW moments
// (switching::plan_switch, the plan the trainer executes), each message over its link's bandwidth;
// senders work in parallel, so the switch takes as long as the busiest sender or receiver.
// With bf16-only switches (price_bf16_switches, switching/bf16_switch_plan.h) the state stays under
// one base strategy: the base costs nothing more, and every step under another pays its two moves
// (bf16 parameters out, float32 gradients back), whichever strategy the step before ran.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hspmd/models/model.h"
#include "hspmd/planner/cost_model.h"
#include "hspmd/planner/dispatcher.h"
#include "hspmd/sharding/plan.h"
#include "hspmd/sharding/strategy.h"
#include "hspmd/switching/switch_plan.h"

namespace hspmd::planner {

struct LengthStrategy {
  int64_t max_len = 0;  // batches whose longest sequence is at most this
  sharding::Strategy strategy;
};

struct Choice {
  size_t strategy = 0;     // index in the set
  Dispatch dispatch;       // of the batch on that strategy's pipelines
  // Per strategy: predicted step seconds plus the switch from `current` (negative: cannot run it).
  std::vector<double> predicted;
  double switch_seconds = 0;  // included in predicted[strategy]
};

class LengthStrategies {
 public:
  // Strategies in increasing max_len (Error otherwise, or when one does not fit the model).
  // `options.seq_len` is the run's context length (how micro-batches are packed).
  LengthStrategies(const models::Model& model, const CostModel& cost_model, std::vector<LengthStrategy> set,
                   const PipelineModelOptions& options);

  // Error (SequenceTooLong) when the batch's longest sequence exceeds every strategy's max_len or
  // memory, naming the length and the largest limit. `current` is the strategy in force (kNone: none
  // yet, so no switch is counted).
  static constexpr size_t kNone = SIZE_MAX;
  Choice choose(std::span<const int64_t> lengths, size_t current) const;

  size_t size() const { return set_.size(); }
  const LengthStrategy& at(size_t i) const { return set_.at(i); }
  const sharding::AnnotationPlan& plan(size_t i) const { return plans_.at(i); }
  const std::vector<PipelineModel>& pipelines(size_t i) const { return models_.at(i); }
  // Predicted seconds of switching from strategy a to strategy b (0 when a == b).
  double switch_seconds(size_t a, size_t b) const { return switch_seconds_.at(a).at(b); }
  int64_t switch_bytes(size_t a, size_t b) const { return switch_bytes_.at(a).at(b); }
  // From now on choose() prices bf16-only switches with the master state under strategy `base`.
  void price_bf16_switches(size_t base);
  // Predicted seconds of the two moves of a step under `s` while `base` holds the state (0: s == base).
  double bf16_step_seconds(size_t s) const { return bf16_steps_.at(s).seconds; }
  // The base given to price_bf16_switches (none before), and the bytes of each step's two moves
  // under `s` (0 for the base).
  std::optional<size_t> bf16_base() const { return bf16_base_; }
  int64_t bf16_params_out_bytes(size_t s) const { return bf16_steps_.at(s).params_out_bytes; }
  int64_t bf16_grads_back_bytes(size_t s) const { return bf16_steps_.at(s).grads_back_bytes; }

 private:
  std::vector<LengthStrategy> set_;
  std::vector<sharding::AnnotationPlan> plans_;
  std::vector<std::vector<PipelineModel>> models_;
  std::vector<std::vector<double>> switch_seconds_;
  std::vector<std::vector<int64_t>> switch_bytes_;
  std::vector<std::vector<switching::ParamLayout>> layouts_;
  const resolve::Topology* topology_ = nullptr;
  std::optional<size_t> bf16_base_;
  struct Bf16Step {
    int64_t params_out_bytes = 0, grads_back_bytes = 0;
    double seconds = 0;
  };
  std::vector<Bf16Step> bf16_steps_;
};

// "4096:A.json" -> {4096, Strategy::from_file("A.json")}; Error naming the flag's text otherwise.
LengthStrategy parse_length_strategy(const std::string& spec);

}  // namespace hspmd::planner
