// The paper's unfused switch baseline, for comparison only (bench/switch_bench): one BSR per
// tensor, one after the other, the lowest-rank owner sending what is not already there. Training
// switches with DistTrainer::switch_to (one fused BSR); nothing but the benchmark calls this.
#pragma once

#include <string>

#include "hspmd/runtime/dist_trainer.h"

namespace hspmd::runtime {

// Collective, like DistTrainer::switch_to, whose report it returns.
SwitchReport switch_unfused_baseline(DistTrainer& trainer, const sharding::AnnotationPlan& plan,
                                     const std::string& name);

}  // namespace hspmd::runtime
