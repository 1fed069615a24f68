#include "hspmd/elastic/elastic_hook.h"

#include <algorithm>

namespace hspmd::elastic {

void ElasticHook::after_step(runtime::TrainingLoop& loop, const runtime::StepMetrics& m) {
  if (!run_.admission_due(m.step)) return;
  const RecoveryReport r = run_.admit(loop.trainer());
  loop.log().line(r.to_string(), r.to_json());
  loop.log().rank_line(loop.trainer().describe());
}

bool ElasticHook::recover(runtime::TrainingLoop& loop, const Error& error) {
  RecoveryReport r;
  for (std::string cause = error.what();;) {
    try {
      r = run_.recover(loop.trainer(), cause);
      break;
    } catch (const Unrecoverable&) {
      throw;
    } catch (const Error& again) {  // another worker failed during the recovery
      cause = again.what();
    }
  }
  loop.rewind(r.resume_step);
  if (r.settled_step) loop.completed_during_recovery(*r.settled_step);
  loop.log().line(r.to_string(), r.to_json());
  loop.log().rank_line(loop.trainer().describe());
  return true;
}

std::string ElasticHook::unusable(const sharding::Strategy& strategy) const {
  const std::vector<int>& live = run_.members();
  for (int r : strategy.ranks()) {
    if (!std::binary_search(live.begin(), live.end(), r)) return "it uses a rank that died";
  }
  return "";
}

runtime::SwitchReport ElasticHook::switch_to(runtime::DistTrainer& trainer, const runtime::ScheduledPlan& target) {
  return run_.switch_to(trainer, target.strategy, target.plan);
}

}  // namespace hspmd::elastic
