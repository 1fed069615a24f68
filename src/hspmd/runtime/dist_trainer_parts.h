// The private pieces of DistTrainer (runtime/dist_trainer.h) that its files share: the trainer is
// one class in three files, dist_trainer.cc (specialization and steps), dist_trainer_checkpoint.cc
// (save, restore, weights) and dist_trainer_switch.cc (graph switching and elastic recovery).
// Nothing outside them includes this header.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "hspmd/core/elapsed.h"
#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/switching/switch_plan.h"

namespace hspmd::runtime {

using graph::TensorRef;
using sharding::Annotation;
using sharding::Region;

// The forward values of one micro-batch, kept from F until B.
struct DistTrainer::MicroBatch {
  int index = 0;
  graph::TensorMap feeds;
  SymBinding binding;
  std::vector<std::vector<Tensor>> values;  // [op][output]
  double loss = 0;
};

// One parameter this rank holds, with its gradient and optimizer state.
struct DistTrainer::ParamState {
  int index = 0;  // in model().params
  std::string name;
  Shape shape;                  // global
  Annotation annotation;        // of the parameter (ZeRO flags cleared)
  Annotation grad_annotation;   // as the backward ops leave the gradient
  Annotation state_annotation;  // of the optimizer state (= annotation without ZeRO-1)
  Region region, state_region;
  Tensor value, grad, exp_avg, exp_avg_sq;
  bool decay = false;  // weight decay applies (matrices)
};

// One annotation plan as this rank runs it: specialized once, kept for switches back to it.
struct DistTrainer::PlanRuntime {
  std::string name;
  std::unique_ptr<specialize::ExecGraph> exec;
  bool active = false;  // this rank holds state and is fed data under the plan (else: a spare)
  std::vector<std::vector<TensorRef>> forward_releases;   // ExecGraph::forward_releases
  std::vector<std::vector<TensorRef>> backward_releases;  // ExecGraph::backward_releases
  specialize::PipelineLayout layout;
  std::vector<specialize::Task> schedule;  // empty on a spare
  specialize::MemoryEstimate memory;
  std::vector<switching::ParamLayout> layouts;  // every parameter, this rank's or not
  std::vector<Annotation> grad_annotations;     // per parameter, as B leaves its gradient
};

namespace dist_detail {

using Clock = std::chrono::steady_clock;

// Where `inner` (global coordinates) starts inside `outer`.
std::vector<int64_t> offsets_in(const Region& outer, const Region& inner);
// Copies `inner` (global coordinates, inside `outer`) out of `t`, which holds `outer`.
Tensor copy_out(const Tensor& t, const Region& outer, const Region& inner, Allocator* allocator);
// True when `device` counts its shard of `a` in sums over all ranks (norms) and saves it in
// checkpoints, so every element is taken exactly once: of a tensor duplicated across subgroups
// only subgroup 0 counts; inside a subgroup, the first device holding each region.
bool counts_once(const Annotation& a, const Shape& shape, int device);

}  // namespace dist_detail
}  // namespace hspmd::runtime
