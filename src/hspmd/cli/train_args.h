// The arguments of `hspmd train` and the pieces its single-process and distributed set-ups share
// (both train through runtime/training_loop.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "hspmd/runtime/trainer.h"
#include "hspmd/runtime/training_loop.h"

namespace hspmd::cli {

struct TrainArgs {
  std::string model, data, save, resume, init_weights, metrics, dump_init_weights;
  int64_t save_every = 0;
  int64_t eval_every = 0;       // validation loss every K steps (and after the last); 0: never
  int64_t eval_tokens = 16384;  // tokens of the validation split each evaluation reads
  runtime::TrainerOptions options;
  // Distributed training (cli/train_dist.cc).
  std::string strategy, devices, trace, schedule = "1f1b";
  // The --strategy as a value rather than a file (the Python API's hspmd.Trainer(model, strategy)).
  std::optional<sharding::Strategy> strategy_value;
  std::vector<std::string> switches;  // --switch STEP:STRATEGY.json, in step order
  std::string switch_bsr = "fused";   // --switch-bsr: resolve::BsrAlgorithm of the --switch moves
  // --switch-states: what a switch moves. params+adam: the float32 weights and both moments, once;
  // bf16-params: the master state stays under one base strategy and each step under another moves
  // its bf16 parameters out and its gradients back (runtime::DistOptions::bf16_switches).
  std::string switch_states = "params+adam";
  // --base-strategy: that base, one of the run's strategy files (by content); empty: the strategy
  // the run starts under.
  std::string base_strategy;
  int nproc = 0;
  double comm_timeout = 300;  // seconds: bound on connecting and on every communication
  double grad_bucket_mb = 25;  // runtime::DistOptions::grad_bucket_mb (0: no overlap)
  std::string comm;           // --comm gloo|nccl (runtime/comm_choice.h); empty: by the device
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

// The options of `hspmd train`, stored into *args: the one place they are defined, for the CLI
// (which makes --model and --data required) and for the Python API (hspmd.Trainer takes each as a
// keyword argument, parsed by these definitions: same names, defaults, checks and messages).
void define_train_options(CLI::App* sub, TrainArgs* args);

// A resumed run (--resume) continues with the options its checkpoint records (learning-rate
// schedule included), whatever the strategy; a flag given to `sub` changes its option, so changing
// lr or steps on resume takes an explicit --lr / --steps. `model` must have the checkpoint's config
// (Error naming the first key that differs).
runtime::TrainerOptions resumed_options(const TrainArgs& args, const CLI::App& sub, const models::Model& model);

// The loop's evaluation and checkpoint cadence (runtime/training_loop.h); `validation` is the
// dataset's validation split when --eval-every is given.
inline runtime::TrainingLoopOptions loop_options(const TrainArgs& args, const data::TokenDataset* validation) {
  return {.eval_every = args.eval_every,
          .eval_tokens = args.eval_tokens,
          .validation = validation,
          .save_dir = args.save,
          .save_every = args.save_every};
}

// "kernels: GEMM oneDNN ... ; SIMD avx2; precision fp32": what the kernels run on and at which
// precision, logged when training starts.
std::string kernels_line(DType precision);

// `hspmd train --strategy`: under `hspmd launch` (or with --nproc, which launches the workers
// itself) every worker trains its part of the strategy; rank 0 reports.
void run_dist_train(const TrainArgs& args);

}  // namespace hspmd::cli
