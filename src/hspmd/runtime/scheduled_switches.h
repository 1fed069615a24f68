// `hspmd train --strategy A.json --switch 20:B.json`: the training-loop hook (runtime/training_loop.h)
// that switches the trainer to each scheduled plan before its step, with one fused BSR of weights
// and Adam moments and no restart (DistTrainer::switch_to, docs/switching.md).
//
//   ScheduledSwitches switches({{1, "A.json", a, plan_a}, {20, "B.json", b, plan_b}}, 0);
//   loop.add_hook(switches);    // before step 20: "switch plan A -> B: ..." and a metrics record
//
// A switch scheduled for a step already taken (a resumed run, a worker joining late) is history and
// is skipped. A refused switch (the plan does not fit) is logged and training goes on under the
// plan in force. Elastic training routes the switches through its own commit (SwitchRoute).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/runtime/training_loop.h"
#include "hspmd/sharding/plan.h"
#include "hspmd/sharding/strategy.h"

namespace hspmd::runtime {

// A strategy file compiled for the model, with the step before which the run switches to it.
struct ScheduledPlan {
  int64_t step = 1;  // the first step trained under it; 1 for the starting strategy
  std::string file;
  sharding::Strategy strategy;
  sharding::AnnotationPlan plan;
};

// How a scheduled switch is carried out when the plain DistTrainer::switch_to is not enough.
class SwitchRoute {
 public:
  virtual ~SwitchRoute() = default;
  // Why the run cannot switch to `strategy` now ("": it can), e.g. it uses a rank that died.
  virtual std::string unusable(const sharding::Strategy& strategy) const = 0;
  // Performs the switch (throws SwitchRefused like DistTrainer::switch_to).
  virtual SwitchReport switch_to(DistTrainer& trainer, const ScheduledPlan& target) = 0;
};

class ScheduledSwitches : public TrainingHook {
 public:
  // `plans` in increasing step order; plans[in_force] is the one the trainer starts under.
  ScheduledSwitches(std::vector<ScheduledPlan> plans, size_t in_force);
  // Every switch goes through `route` (it must outlive this object); nullptr: DistTrainer::switch_to.
  void set_route(SwitchRoute* route) { route_ = route; }
  // How the plain DistTrainer::switch_to moves the state (`hspmd train --switch-bsr`).
  void set_bsr_algorithm(resolve::BsrAlgorithm algorithm) { algorithm_ = algorithm; }

  void before_step(TrainingLoop& loop) override;

  const std::vector<ScheduledPlan>& plans() const { return plans_; }

 private:
  std::vector<ScheduledPlan> plans_;
  size_t next_;  // the next plan to switch to
  SwitchRoute* route_ = nullptr;
  resolve::BsrAlgorithm algorithm_ = resolve::BsrAlgorithm::kFusedHeuristic;
};

}  // namespace hspmd::runtime
