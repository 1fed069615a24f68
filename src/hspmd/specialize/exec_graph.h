// ExecGraph: one rank's executable view of a defined graph under an annotation plan (§6.2). Every
// rank builds its own from the same graph and plan; nothing is exchanged.
//
//   Graph g = model.build({}).graph;         AnnotationPlan plan = model.compile_plan(st);
//   ExecGraph eg(g, plan, /*rank=*/2);
//   eg.forward_ops()    // F: forward ops rank 2 takes part in (its stage's compute, and every
//                       //    Reshard it sends into or receives from), in graph order
//   eg.backward_ops()   // B: the same for the backward ops
//   eg.op(id)           // the op with rank 2's attributes (a vocab-parallel embedding's row range)
//   eg.local_shape(t, binding)   // what rank 2 holds of tensor t for one micro-batch's symbols
//
// The phases of a training step on a rank (architecture §6):
//   Pre   parameter preparation before the passes. Weights are float32 and whole per TP shard
//         (ZeRO-1 shards optimizer states only), so there is nothing to gather: Pre is empty here.
//   F, B  forward_ops() / backward_ops() once per micro-batch, in the order of the rank's schedule
//         (specialize/schedule.h); Reshards between stages hand activations and gradients over.
//         With plan().recompute, B replays a decoder layer's forward ops (backward_steps()) just
//         before the first backward op that reads one of their values, so F keeps only what
//         crosses a layer boundary (and what B reads outside the layers) per micro-batch in flight.
//   Post  gradient accumulation over micro-batches, gradient sync (gradient_syncs(): deduced ->
//         optimizer-state annotation), optimizer on the state shard, parameter gather (state ->
//         parameter annotation). runtime/dist_trainer.h runs it.
// An op belongs to a rank when the rank holds one of its outputs; a Reshard when the rank holds its
// input or its output. Leaves (placeholders, parameters) are not in F or B: placeholders() and
// parameters() list the ones the rank is fed / holds.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "hspmd/core/sym_expr.h"
#include "hspmd/graph/deduction.h"
#include "hspmd/graph/graph.h"
#include "hspmd/graph/step_plan.h"
#include "hspmd/graph/token_loss.h"
#include "hspmd/sharding/annotation.h"
#include "hspmd/sharding/plan.h"

namespace hspmd::specialize {

// The part of a global tensor (symbolic shape `shape`, annotation `a`) that `device` holds, with the
// symbols of the device's subgroup bound: a top-tier split of a dim that depends on a symbol is
// already the subgroup's share (each pipeline binds its own T); of a static dim, 1/hsize of it.
// nullopt when the device holds none of it.
std::optional<sharding::Region> local_region(const SymShape& shape, const sharding::Annotation& a, int device,
                                             const SymBinding& binding);
// local_region(...)->shape(); Error naming `tensor` when the device holds none of it.
Shape local_shape(const SymShape& shape, const sharding::Annotation& a, int device, const SymBinding& binding,
                  const std::string& tensor);
// The same annotation with every ZeRO flag cleared (the layout of the values themselves).
sharding::Annotation without_zero(const sharding::Annotation& a);

// Logits [T, V] annotated `logits`: the ranks holding the vocabulary shards of the rows `device`
// holds (those whose shard coordinates differ from the device's on dim 1 only), in vocabulary
// order, the device included. Empty when the device holds whole rows.
std::vector<int> vocab_shard_ranks(const sharding::Annotation& logits, int device);

// The subgroup of the data `rank` is fed, given the annotations of the graph's placeholders in graph
// order: that of the first one it holds split across subgroups (the tokens), else of the last one it
// holds; -1 when it holds none.
int data_group(const std::vector<const sharding::Annotation*>& placeholders, int rank);

class ExecGraph {
 public:
  // Deduces the annotations itself; the graph must outlive the ExecGraph.
  ExecGraph(const graph::Graph& g, const sharding::AnnotationPlan& plan, int rank);
  // Shares one plan and one deduction between the ranks of a process (a plan report builds one per
  // class of ranks; copying a plan at thousands of ranks per rank was most of its time).
  ExecGraph(const graph::Graph& g, std::shared_ptr<const sharding::AnnotationPlan> plan,
            std::shared_ptr<const graph::DeducedAnnotations> deduced, int rank);

  int rank() const { return rank_; }
  const graph::Graph& graph() const { return graph_; }
  const sharding::AnnotationPlan& plan() const { return *plan_; }
  const graph::DeducedAnnotations& deduced() const { return *deduced_; }

  const std::vector<int>& forward_ops() const { return forward_; }
  const std::vector<int>& backward_ops() const { return backward_; }
  // B as run: backward_ops(), with plan().recompute each layer's replayed forward ops (replay =
  // true) just before the first backward op that reads one of their values; the rule is
  // graph::StepPlan's (graph/step_plan.h). Replayed Reshards are within a stage (tensor
  // parallelism), run by all its ranks in the same order; one handing a layer's output to another
  // stage is a layer boundary and never replayed.
  using BackwardStep = graph::StepPlan::Step;
  const std::vector<BackwardStep>& backward_steps() const { return steps_->backward(); }
  bool replayed(int id) const { return steps_->replayed(id); }
  const std::vector<int>& placeholders() const { return placeholders_; }
  const std::vector<int>& parameters() const { return parameters_; }
  // The op with this rank's attributes.
  const graph::Op& op(int id) const;
  const sharding::Annotation& annotation(graph::TensorRef t) const { return deduced_->at(t); }
  bool holds(graph::TensorRef t) const;
  Shape local_shape(graph::TensorRef t, const SymBinding& binding) const;
  // Forward tensors that B reads and does not recompute: kept from F(m) until B(m).
  bool saved_for_backward(graph::TensorRef t) const { return steps_->saved_for_backward(t); }
  // After forward_ops()[k] runs, the values nothing later in F or in B reads, other than `keep`
  // (the loss the trainer reports): F frees each value as soon as its last reader has run.
  std::vector<std::vector<graph::TensorRef>> forward_releases(graph::TensorRef keep) const;
  // After backward_steps()[k] runs, the values nothing later in B reads, other than `keep` (the
  // parameter gradients the trainer accumulates after B).
  std::vector<std::vector<graph::TensorRef>> backward_releases(const std::vector<graph::TensorRef>& keep) const;
  // For an op whose vocabulary this rank holds one shard of (a vocab-parallel cross-entropy and its
  // backward): the ranks holding the shards of the same rows, in vocabulary order, this rank
  // included. Empty when the rank holds whole rows.
  const std::vector<int>& vocab_shard_ranks(int id) const;
  // Subgroup of the data placeholders this rank is fed (= index into plan().pipelines); -1 if none.
  int data_group() const { return data_group_; }

 private:
  void build();
  void set_vocab_shard(int id, const graph::LossLogits& logits);

  // The op as this rank runs it, copied from the graph on the first adjustment.
  graph::Op& local_op(int id);

  const graph::Graph& graph_;
  std::shared_ptr<const sharding::AnnotationPlan> plan_;
  std::shared_ptr<const graph::DeducedAnnotations> deduced_;
  int rank_;
  std::vector<int> forward_, backward_, placeholders_, parameters_;
  std::map<int, graph::Op> local_ops_;     // the ops whose attributes this rank adjusts, by op id
  std::optional<graph::StepPlan> steps_;   // set by build()
  std::map<int, std::vector<int>> vocab_shard_ranks_;
  int data_group_ = -1;
};

}  // namespace hspmd::specialize
