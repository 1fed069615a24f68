// The step runner: this rank's part of one global batch under a specialized plan
// (runtime/plan_cache.h). The global batch is split over the plan's pipelines (by token weight, or
// by the run's dispatch by length); this rank's pipeline's micro-batches are packed and fed one by
// one, in its schedule's order (GPipe or 1F1B); F and B run op by op (each value freed after its
// last reader, Reshards executed on the run's communicators) and the parameter gradients are
// summed over micro-batches into the training state. The backward pass that makes gradients final
// (this rank's last; under ZeRO-2 the last of each group of micro-batches) hands each one, as the
// op computing it finishes, to the bucketed gradient sync (runtime/bucketed_gradient_sync.h),
// which reduces its buckets on a communication thread meanwhile. Under ZeRO-3 each gradient goes to
// the sync as soon as B produces it, to be reduced into its shard on that thread, which also
// gathers the parameters layer by layer, one layer ahead (runtime/parameter_gathers.h). What
// follows (the rest of the gradient sync, AdamW) is the trainer's (runtime/dist_trainer.h).
//
//   StepRunner runner(model, graph, rank, {.seq_len = 256},
//                     {allocator, session, cache, pacer, tracer, compute, sync});
//   double loss_sum = runner.run(plan, state, segments, labels, {.train = true, .step = 1});
//   if (runner.counts_loss(plan)) ...   // whether that sum enters the global loss
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hspmd/core/allocator.h"
#include "hspmd/data/packing.h"
#include "hspmd/graph/compute_device.h"
#include "hspmd/models/model.h"
#include "hspmd/resolve/resolver.h"
#include "hspmd/runtime/bucketed_gradient_sync.h"
#include "hspmd/runtime/compute_pacer.h"
#include "hspmd/runtime/parameter_gathers.h"
#include "hspmd/runtime/plan_cache.h"
#include "hspmd/runtime/reshard_exec.h"
#include "hspmd/runtime/trace.h"
#include "hspmd/runtime/training_state.h"
#include "hspmd/specialize/schedule.h"

namespace hspmd::runtime {

struct StepRunnerOptions {
  int64_t seq_len = 256;  // tokens of a packed row
  specialize::ScheduleKind schedule = specialize::ScheduleKind::k1F1B;
  data::BatchLayout layout = data::BatchLayout::kPacked;
  // When set, a training batch is split over the pipelines by this (DistOptions::split_batch).
  std::function<data::BatchSplit(const std::vector<data::Segment>& global)> split_batch{};
};

// The trainer's parts the runner computes with; they must outlive it.
struct StepRunnerParts {
  Allocator& allocator;  // every value of the step
  CommSession& session;  // the Reshards' communicators
  resolve::ResolveCache& resolutions;
  ComputePacer& pacer;  // the emulated device's speed
  Tracer& tracer;
  const graph::ComputeDevice& compute;  // allocator's device: its kernels and gradient sums
  BucketedGradientSync& gradient_sync;  // started by the trainer for each training step
};

// One pass over the batch: training (F and B, gradients summed) or evaluation (F only).
struct StepPass {
  bool train = true;
  int64_t step = 1;  // the step in progress (fault injection names it)
  std::optional<data::BatchLayout> layout{};  // this pass's micro-batch layout; unset: the runner's
  // Defined (float64 on the device): the losses add into loss_total[loss_at] there and run()
  // returns 0, so the caller reads them with its other totals in one host wait. Undefined: run()
  // reads its own total once.
  Tensor loss_total{};
  int64_t loss_at = 0;
};

class StepRunner {
 public:
  // `model` and `graph` (the model's graph as the trainer built it) must outlive the runner.
  StepRunner(const models::Model& model, const models::ModelGraph& graph, int rank, StepRunnerOptions options,
             StepRunnerParts parts);
  ~StepRunner();

  // Runs this rank's micro-batches of `segments` (the global batch; `labels` its labelled tokens)
  // under `plan`; with pass.train, adds each parameter's gradient to state.tensors[i].grad and hands
  // the final ones to the gradient sync (started on `state`). Returns the sum of this rank's
  // micro-batch losses (0 when pass.loss_total takes it).
  double run(const SpecializedPlan& plan, ShardedState& state, const std::vector<data::Segment>& segments,
             int64_t labels, StepPass pass);
  // Whether this rank's micro-batch losses enter the global loss under `plan`: each pipeline's last
  // stage counts its micro-batches once.
  bool counts_loss(const SpecializedPlan& plan) const;

 private:
  struct MicroBatch;
  // This rank's micro-batches of the batch, and the schedule that runs them.
  struct Share;
  Share share_of(const SpecializedPlan& plan, const std::vector<data::Segment>& segments, bool train) const;
  void feed(MicroBatch& mb, const std::vector<data::Segment>& segments, int64_t labels) const;
  void forward(MicroBatch& mb, ShardedState& state);
  // What a backward pass does with the gradients it computes: adds them to the state's, or also
  // hands the sums to the gradient sync (a round: ZeRO-2's group ends, ZeRO-0/1's last pass).
  // ZeRO-3 (every pass a group: kIntoShards) hands each to the sync as it is produced.
  enum class GradientRound { kNone, kIntoShards, kSynced };
  void backward(MicroBatch& mb, ShardedState& state, GradientRound round);
  // Adds mb's gradient of s to s.grad (the first micro-batch's is copied, unless `final`: then it
  // is s.grad, and mb lets go of it).
  void accumulate(MicroBatch& mb, TensorState& s, bool final);
  // ZeRO-3's gathers of a pass (runtime/parameter_gathers.h), on the gradient sync's thread.
  ParameterGathers parameter_gathers(const std::vector<specialize::GatherUnit>& units, const ShardedState& state);
  void run_op(int id, MicroBatch& mb);
  Tensor run_reshard(int id, const Tensor& src, const SymBinding& binding, const std::string& channel);
  // The vocab-parallel loss's all-gather of the shards' row statistics (graph/token_loss.h).
  Tensor gather_vocab_shards(const graph::Op& op, const std::vector<int>& shards, const Tensor& mine);
  Tensor own_part(const sharding::Annotation& a, const Tensor& fed) const;  // this rank's part of a fed tensor
  std::string where(const std::string& op) const;  // "rank 2, op 'x': " for errors

  const models::Model& model_;
  const models::ModelGraph& graph_;
  int rank_;
  StepRunnerOptions options_;
  StepRunnerParts parts_;
  const SpecializedPlan* plan_ = nullptr;  // during run()
  int64_t step_ = 0;                       // during run()
  Tensor loss_total_;                      // during run(): where the micro-batch losses add up
  int64_t loss_at_ = 0;
  data::BatchLayout layout_ = data::BatchLayout::kPacked;  // during run()
};

}  // namespace hspmd::runtime
