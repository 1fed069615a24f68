// Distributed runs against the single-process oracle, shared by the runtime's dist tests: a run's
// losses, gradient norms and final weights (assembled from every rank's shards) next to those of the
// single-process Trainer on the same data (relative 1e-5, float32). Ranks run as threads of this
// process over Gloo (comm/thread_ranks.h).
//
//   DistRun r = run_phases({{1, strategy(dp2)}, {3, strategy(tp2)}}, dist_options(4));  // switch before step 3
//   expect_matches_single_process(r, 4);
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "hspmd/graph/graph.h"
#include "hspmd/models/llama_config.h"
#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/sharding/strategy.h"

namespace hspmd::runtime::testing {

// 4 layers so pipelines can have 3 stages; TP 2 divides heads (4), KV heads (2), hidden, vocab.
models::LlamaConfig dist_config(bool tied = false);
TrainerOptions dist_options(int64_t steps);  // tiny_options on one kernel thread
sharding::Strategy strategy(const std::string& json);
// `pipelines` (a strategy's "pipelines" array) under ZeRO stage `zero`, named "zero<stage>".
sharding::Strategy with_zero(int zero, const std::string& pipelines, bool recompute = false);

struct DistRun {
  std::vector<std::vector<double>> losses, grad_norms;  // [rank][step]
  std::vector<std::vector<StepMetrics>> steps;          // [rank][step]
  std::vector<size_t> peak_bytes;                       // [rank] the allocator's high-water mark over all steps
  graph::TensorMap weights;                             // assembled from every rank's shards
  std::vector<std::vector<SwitchReport>> switches;      // [rank] in order
  std::vector<int> specializations;                     // [rank] plans the trainer specialized
};

// The strategy in force from `first_step` on (1 for the first phase).
struct Phase {
  int64_t first_step = 1;
  sharding::Strategy strategy;
};

struct RunOptions {
  specialize::ScheduleKind schedule = specialize::ScheduleKind::k1F1B;
  bool tied = false;
  std::function<void(DistTrainer&)> before{};  // after construction (e.g. restore)
  std::function<void(DistTrainer&)> after{};   // at the end (e.g. save)
  std::function<void(int rank, DistOptions&)> configure{};  // per-rank options (emulated devices ...)
  std::string dataset{};  // a token dataset directory; empty: the bundled corpus (corpus_dataset())
};

// Trains on every rank any phase uses, switching (DistTrainer::switch_to) before each phase's
// first step.
DistRun run_phases(const std::vector<Phase>& phases, const TrainerOptions& o, const RunOptions& ro = {});
inline DistRun run(const sharding::Strategy& st, const TrainerOptions& o, const RunOptions& ro = {}) {
  return run_phases({{1, st}}, o, ro);
}

// Adds the trainer's parameter shards into whole tensors of `weights` (created at first use).
void add_parameter_shards(const DistTrainer& t, graph::TensorMap& weights);

// ||a - b|| / ||b||. Not the element-wise maximum: AdamW divides by sqrt(v), so an element whose
// gradient is ~0 turns a 1e-7 reassociation difference of the gradient sum into a visible one of
// its update, while the tensor as a whole agrees to float rounding.
double relative_difference(const Tensor& a, const Tensor& b);

// Every rank's step metrics (got[rank][step]) against one process's: as many steps, losses within
// relative loss_rtol, gradient norms within relative norm_rtol (defaults: float32's bounds).
void expect_steps_match(const std::vector<std::vector<StepMetrics>>& got, const std::vector<StepMetrics>& expected,
                        double loss_rtol = 1e-5, double norm_rtol = 1e-5);

// Steps first_step .. first_step + steps - 1 of `run` against the single-process run of as many steps
// (at `precision`: a bf16 run is checked against the bf16 single-process run, to bounds that allow
// for bf16 rounding flips: relative 1e-4 on losses, 5e-4 on gradient norms, 5e-3 on weights).
// `dataset` as in RunOptions. Losses and gradient norms of float32 runs agree to relative 1e-5; each
// weight tensor to `weights_tolerance` (see relative_difference on why AdamW can enlarge rounding).
void expect_matches_single_process(const DistRun& run, int64_t steps, int64_t first_step = 1, bool tied = false,
                                   const std::string& dataset = "", double weights_tolerance = 1e-5,
                                   DType precision = DType::kFloat32);

}  // namespace hspmd::runtime::testing
