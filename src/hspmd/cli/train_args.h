// The arguments of `hspmd train` and the pieces its single-process and distributed paths share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hspmd/runtime/trainer.h"

namespace hspmd::cli {

struct TrainArgs {
  std::string model, data, save, resume, init_weights, metrics, dump_init_weights;
  int64_t save_every = 0;
  runtime::TrainerOptions options;
  // Distributed training (cli/train_dist.cc).
  std::string strategy, devices, trace, schedule = "1f1b";
  std::vector<std::string> switches;  // --switch STEP:STRATEGY.json, in step order
  int nproc = 0;
  double comm_timeout = 300;  // seconds: bound on connecting and on every communication
  bool check_single = false;
};

// "step    12/100  loss 3.1234  lr ...  grad_norm ...  tok/s ...  step 0.123s"
std::string step_line(const runtime::StepMetrics& m, int64_t total);

// `hspmd train --strategy`: under `hspmd launch` (or with --nproc, which launches the workers
// itself) every worker trains its part of the strategy; rank 0 reports.
void run_dist_train(const TrainArgs& args);

}  // namespace hspmd::cli
