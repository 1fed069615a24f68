#include "hspmd/runtime/scheduled_switches.h"

#include <utility>

namespace hspmd::runtime {

ScheduledSwitches::ScheduledSwitches(std::vector<ScheduledPlan> plans, size_t in_force)
    : plans_(std::move(plans)), next_(in_force + 1) {}

void ScheduledSwitches::before_step(TrainingLoop& loop) {
  DistTrainer& trainer = loop.trainer();
  while (next_ < plans_.size() && plans_[next_].step <= trainer.step_count()) ++next_;  // history
  if (next_ >= plans_.size() || plans_[next_].step != trainer.step_count() + 1) return;
  const ScheduledPlan& target = plans_[next_++];
  if (route_ != nullptr) {
    if (const std::string why = route_->unusable(target.strategy); !why.empty()) {
      loop.log().line("switch to strategy " + target.strategy.name + " skipped: " + why);
      return;
    }
  }
  try {
    const SwitchReport r =
        route_ != nullptr ? route_->switch_to(trainer, target)
                          : trainer.switch_to(target.plan, target.strategy.name, algorithm_);
    loop.log().line(r.to_string(), r.to_json());
    loop.log().rank_line(trainer.describe());
  } catch (const SwitchRefused& e) {
    loop.log().line(std::string(e.what()) + "; training goes on under plan " + trainer.plan_name());
  }
}

}  // namespace hspmd::runtime
