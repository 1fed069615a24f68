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
  int64_t eval_every = 0;       // validation loss every K steps (and after the last); 0: never
  int64_t eval_tokens = 16384;  // tokens of the validation split each evaluation reads
  runtime::TrainerOptions options;
  // Distributed training (cli/train_dist.cc).
  std::string strategy, devices, trace, schedule = "1f1b";
  std::vector<std::string> switches;  // --switch STEP:STRATEGY.json, in step order
  int nproc = 0;
  double comm_timeout = 300;  // seconds: bound on connecting and on every communication
  bool check_single = false;
  // The planner's cluster spec and profile: elastic training re-plans with them, dispatch by
  // length prices with them.
  std::string cluster, profile;
  // Elastic training (cli/train_dist.cc, docs/elastic.md): survivors of a dead worker re-plan
  // and go on.
  bool elastic = false;
  double heartbeat_timeout = 5;  // seconds without a heartbeat before a worker counts as dead
  int max_restarts = 0;          // with --nproc: the launcher restarts a dead worker, which rejoins
  // Dispatch by length (cli/train_dispatch.h).
  std::vector<std::string> strategies_for_max_len;  // --strategy-for-max-len MAXLEN:STRATEGY.json
  bool dispatch = false;                            // --dispatch: by length on the one --strategy
  int dispatch_ahead = 2;                           // decisions computed ahead of the trainer
};

// "step    12/100  loss 3.1234  lr ...  grad_norm ...  tok/s ...  step 0.123s"
std::string step_line(const runtime::StepMetrics& m, int64_t total);

// Whether the step just taken (1-based) is followed by a validation evaluation.
inline bool evaluates_after(const TrainArgs& args, int64_t step, bool last) {
  return args.eval_every > 0 && (last || step % args.eval_every == 0);
}
// "eval after step 20: validation loss 2.3456, perplexity 10.44", and its metrics line
// {"event": "eval", "step": 20, "val_loss": 2.3456}.
std::string eval_line(int64_t step, double loss);
std::string eval_record(int64_t step, double loss);
// "kernels: GEMM oneDNN ... ; SIMD avx2; precision fp32": what the kernels run on and at which
// precision, logged when training starts.
std::string kernels_line(DType precision);

// `hspmd train --strategy`: under `hspmd launch` (or with --nproc, which launches the workers
// itself) every worker trains its part of the strategy; rank 0 reports.
void run_dist_train(const TrainArgs& args);

}  // namespace hspmd::cli
