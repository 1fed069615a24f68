// Elastic training's part of the training loop (runtime/training_loop.h, docs/elastic.md):
//   recover     an Error escaped an iteration: the survivors agree, settle the interrupted step,
//               re-plan and move the state (ElasticRun::recover, again if another worker fails
//               meanwhile); the settled step and the recovery are logged
//   after_step  restarted workers that asked to join are admitted at this step boundary
//   switches    a scheduled switch (--switch) is committed through the run, and skipped when its
//               strategy uses a rank that died (runtime::SwitchRoute)
//
//   ElasticHook hook(run);
//   loop.add_hook(hook);
//   switches.set_route(&hook);
#pragma once

#include <string>

#include "hspmd/elastic/elastic_run.h"
#include "hspmd/runtime/scheduled_switches.h"
#include "hspmd/runtime/training_loop.h"

namespace hspmd::elastic {

class ElasticHook : public runtime::TrainingHook, public runtime::SwitchRoute {
 public:
  // The run must outlive the hook.
  explicit ElasticHook(ElasticRun& run) : run_(run) {}

  void after_step(runtime::TrainingLoop& loop, const runtime::StepMetrics& m) override;
  // Throws Unrecoverable when elastic training cannot get past the failure.
  bool recover(runtime::TrainingLoop& loop, const Error& error) override;

  std::string unusable(const sharding::Strategy& strategy) const override;
  runtime::SwitchReport switch_to(runtime::DistTrainer& trainer, const runtime::ScheduledPlan& target) override;

 private:
  ElasticRun& run_;
};

}  // namespace hspmd::elastic
