// The sharded training state of one rank: for every parameter it holds under the current plan, the
// slice of the value and the slices of AdamW's two moments, with the annotations and regions that
// say which slices. One struct, TensorState, is what steps update, what a switch moves, what a
// checkpoint saves and restores and what elastic recovery moves from survivors: each of them walks
// the state by part (switching/state_parts.h), never by index arithmetic.
//
//   ShardedState state = ShardedState::laid_out(plan, model.params, rank, optimizer);   // regions, no tensors
//   state.initialize(model.graph, model.params, seed, allocator);  // single-process init's slices, zero moments
//   for (TensorState& t : state.tensors) t.part(StatePart::kExpAvg) ...   // m, in t.state_region
//   write_rank_shards(dir, rank, state.shards(rank, /*with_moments=*/true));
//
// Regions are global coordinates: `region` is this rank's slice of the value (under the parameter's
// annotation, ZeRO flags cleared; under ZeRO-3 the optimizer-state annotation: the master weights
// are sharded too), `state_region` its slice of the moments (the optimizer-state annotation; a
// ZeRO-1 shard inside `region`, else equal to it).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hspmd/core/allocator.h"
#include "hspmd/core/tensor.h"
#include "hspmd/graph/graph.h"
#include "hspmd/graph/optimizer.h"
#include "hspmd/runtime/sharded_checkpoint.h"
#include "hspmd/sharding/annotation.h"
#include "hspmd/sharding/region.h"
#include "hspmd/switching/state_parts.h"

namespace hspmd::runtime {

struct SpecializedPlan;

// One parameter this rank holds: its state's slices and, during a step, its gradient.
struct TensorState {
  int param = 0;     // index in the model's parameters (Model::parameters() order)
  std::string name;  // Hugging Face name
  Shape shape;       // global
  bool decay = false;  // weight decay applies (matrices, or every tensor with decay_vectors)
  sharding::Annotation annotation;        // of the value (ZeRO flags cleared; ZeRO-3: state_annotation)
  // Where the passes read the value (switching::ParamLayout::read): `annotation`, or under ZeRO-3
  // the parameter's own, all-gathered from the value's shard layer by layer (runtime/parameter_gathers.h).
  sharding::Annotation read_annotation;
  sharding::Annotation grad_annotation;   // as the backward ops leave the gradient
  sharding::Annotation state_annotation;  // of the moments (= annotation without ZeRO-1)
  sharding::Region region, state_region;
  Tensor value, exp_avg, exp_avg_sq;
  Tensor grad;  // summed over the step's micro-batches, in grad_annotation's layout; empty between steps
  // ZeRO-2 (runtime/gradient_sync.h): the gradient reduced group of micro-batches by group, in
  // state_annotation's layout; empty between steps (and under ZeRO-0/1, which reduce in Post).
  Tensor grad_shard;

  Tensor& part(switching::StatePart p);
  const Tensor& part(switching::StatePart p) const;
  const sharding::Region& region_of(switching::StatePart p) const;
  const sharding::Annotation& annotation_of(switching::StatePart p) const;
};

// Reads one part's slice: (tensor name as state_tensor_name() spells it, global shape, region).
using StateReader = std::function<Tensor(const std::string&, const Shape&, const sharding::Region&)>;

struct ShardedState {
  std::vector<TensorState> tensors;  // the parameters this rank holds, in the model's order

  // The state `rank` holds under `plan` (`params`: the model's parameters): annotations and
  // regions, no tensors allocated.
  static ShardedState laid_out(const SpecializedPlan& plan, const std::vector<graph::TensorRef>& params, int rank,
                               const graph::OptimizerOptions& optimizer);
  // Values as the single-process run initializes them (each element from the parameter's
  // initializer in `graph`, by seed, name and global index), moments zero.
  void initialize(const graph::Graph& graph, const std::vector<graph::TensorRef>& params, uint64_t seed,
                  Allocator* allocator);
  // Every part allocated and zero (to be filled by a restore).
  void zero(Allocator* allocator);
  // Every part read from `read`.
  void read(const StateReader& read);
  // This rank's shards, each element once over all ranks (counts_once): values, and with
  // `with_moments` the moments too, named by state_tensor_name().
  std::vector<SavedShard> shards(int rank, bool with_moments) const;
};

// ---- Slices of tensors in global coordinates ----

// Where `inner` (global coordinates) starts inside `outer`.
std::vector<int64_t> offsets_in(const sharding::Region& outer, const sharding::Region& inner);
// Copies `inner` (global coordinates, inside `outer`) out of `t`, which holds `outer`.
Tensor copy_out(const Tensor& t, const sharding::Region& outer, const sharding::Region& inner, Allocator* allocator);
// True when `device` counts its shard of `a` in sums over all ranks (norms) and saves it in
// checkpoints, so every element is taken exactly once: of a tensor duplicated across subgroups
// only subgroup 0 counts; inside a subgroup, the first device holding each region.
bool counts_once(const sharding::Annotation& a, const Shape& shape, int device);

}  // namespace hspmd::runtime
