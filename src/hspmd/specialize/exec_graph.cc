#include "hspmd/specialize/exec_graph.h"

#include <algorithm>

#include "hspmd/core/error.h"
#include "hspmd/graph/token_loss.h"

namespace hspmd::specialize {

using graph::Op;
using graph::OpKind;
using graph::TensorRef;
using sharding::Annotation;
using sharding::Region;

std::optional<Region> local_region(const SymShape& shape, const Annotation& a, int device, const SymBinding& binding) {
  const auto where = a.locate(device);
  if (!where) return std::nullopt;
  std::vector<int64_t> dims = evaluate(shape, binding).dims();
  const int h = a.hdim();
  Region part = Region::full(Shape(dims));
  if (h >= 0 && h < static_cast<int>(dims.size()) && shape[h].symbols().empty()) {
    part = part.piece(h, a.hsize(), where->first);  // a static dim: the subgroup's even share
  }
  return a.ds(where->first).region(where->second, part);
}

Shape local_shape(const SymShape& shape, const Annotation& a, int device, const SymBinding& binding,
                  const std::string& tensor) {
  std::optional<Region> r;
  try {
    r = local_region(shape, a, device, binding);
  } catch (const Error& e) {
    // A micro-batch shape the sharding cannot split evenly (tokens over TP x CP, or over TP under
    // sequence parallelism): name the tensor, its sharding and the binding.
    std::string bound;
    for (const auto& [symbol, value] : binding) bound += (bound.empty() ? "" : ", ") + symbol + " = " + std::to_string(value);
    HSPMD_THROW() << "'" << tensor << "' (" << a.to_string() << ") on device " << device << " with " << bound << ": "
                  << e.what();
  }
  HSPMD_CHECK(r.has_value()) << "device " << device << " holds no part of '" << tensor << "' (" << a.to_string() << ")";
  return r->shape();
}

Annotation without_zero(const Annotation& a) {
  std::vector<sharding::DistState> states;
  for (const sharding::DistState& ds : a.ds_union()) states.push_back(ds.with_zero(false));
  return a.with_ds_union(std::move(states));
}

std::vector<int> vocab_shard_ranks(const Annotation& logits, int device) {
  const auto [sub, index] = *logits.locate(device);
  const sharding::DistState& ds = logits.ds(sub);
  if (ds.degree(1) <= 1) return {};
  std::vector<std::pair<int, int>> shards;  // (vocabulary coordinate, rank)
  for (int j = 0; j < ds.device_num(); ++j) {
    const bool same_rows = std::all_of(ds.entries().begin(), ds.entries().end(), [&](const auto& e) {
      return e.dim == 1 || ds.coord(j, e.dim) == ds.coord(index, e.dim);
    });
    if (same_rows) shards.emplace_back(ds.coord(j, 1), logits.dg_union()[sub][j]);
  }
  std::sort(shards.begin(), shards.end());
  std::vector<int> ranks;
  for (const auto& [coord, rank] : shards) ranks.push_back(rank);
  return ranks;
}

int data_group(const std::vector<const Annotation*>& placeholders, int rank) {
  int any = -1;
  for (const Annotation* a : placeholders) {
    const auto where = a->locate(rank);
    if (!where) continue;
    if (a->hdim() >= 0) return where->first;
    any = where->first;
  }
  return any;
}

ExecGraph::ExecGraph(const graph::Graph& g, const sharding::AnnotationPlan& plan, int rank)
    : ExecGraph(g, std::make_shared<const sharding::AnnotationPlan>(plan),
                std::make_shared<const graph::DeducedAnnotations>(graph::deduce_annotations(g, plan)), rank) {}

ExecGraph::ExecGraph(const graph::Graph& g, std::shared_ptr<const sharding::AnnotationPlan> plan,
                     std::shared_ptr<const graph::DeducedAnnotations> deduced, int rank)
    : graph_(g), plan_(std::move(plan)), deduced_(std::move(deduced)), rank_(rank) {
  build();
}

const Op& ExecGraph::op(int id) const {
  auto it = local_ops_.find(id);
  return it != local_ops_.end() ? it->second : graph_.op(id);
}

Op& ExecGraph::local_op(int id) { return local_ops_.try_emplace(id, graph_.op(id)).first->second; }

bool ExecGraph::holds(TensorRef t) const { return deduced_->at(t).locate(rank_).has_value(); }

Shape ExecGraph::local_shape(TensorRef t, const SymBinding& binding) const {
  return specialize::local_shape(graph_.info(t).shape, deduced_->at(t), rank_, binding, graph_.tensor_name(t));
}

const std::vector<int>& ExecGraph::vocab_shard_ranks(int id) const {
  static const std::vector<int> kNone;
  auto it = vocab_shard_ranks_.find(id);
  return it == vocab_shard_ranks_.end() ? kNone : it->second;
}

std::vector<std::vector<TensorRef>> ExecGraph::forward_releases(TensorRef keep) const {
  return steps_->releases({keep}, [this](TensorRef t) { return holds(t); }).forward;
}

std::vector<std::vector<TensorRef>> ExecGraph::backward_releases(const std::vector<TensorRef>& keep) const {
  return steps_->releases(keep, [this](TensorRef t) { return holds(t); }).backward;
}

// A token loss over logits split on the vocabulary inside this rank's subgroup: the rank's column
// range (attributes) and the ranks holding the other columns of the same rows.
void ExecGraph::set_vocab_shard(int id, const graph::LossLogits& logits) {
  std::vector<int> ranks = specialize::vocab_shard_ranks(logits.annotation, rank_);
  if (ranks.empty()) return;
  const int64_t vocab = logits.vocab.evaluate({});
  const auto [sub, index] = *logits.annotation.locate(rank_);  // the top tier never splits V (deduction)
  // The columns of any row block: as many rows as the tokens are split into (context parallelism).
  const sharding::DistState& ds = logits.annotation.ds(sub);
  const Region columns = ds.region(index, Region::full(Shape{ds.degree(0), vocab}));
  graph::OpAttrs& attrs = local_op(id).attrs;
  attrs.vocab_start = columns.begin[1];
  attrs.vocab_size = vocab;
  vocab_shard_ranks_[id] = std::move(ranks);
}

void ExecGraph::build() {
  const int n = graph_.num_ops();
  std::vector<const Annotation*> placeholders;
  for (int id = 0; id < n; ++id) {
    const Op& op = graph_.op(id);
    const TensorRef out{id, 0};
    bool mine = holds(out);
    if (op.kind == OpKind::kReshard) mine = mine || holds(op.inputs[0]);
    if (!mine) continue;
    switch (op.kind) {
      case OpKind::kPlaceholder:
        placeholders_.push_back(id);
        placeholders.push_back(&annotation(out));
        break;
      case OpKind::kParameter:
        parameters_.push_back(id);
        break;
      default:
        (op.backward ? backward_ : forward_).push_back(id);
    }
    // A vocab-parallel table shard covers rows [vocab_start, vocab_start + rows): the lookup and its
    // gradient work in global token ids and leave the other rows to the other shards.
    if (op.kind == OpKind::kEmbedding || op.kind == OpKind::kEmbeddingBwd) {
      const TensorRef table = op.kind == OpKind::kEmbedding ? op.inputs[0] : out;
      const SymShape& shape = graph_.info(table).shape;
      std::optional<Region> r = local_region(shape, annotation(table), rank_, {});
      HSPMD_CHECK(r.has_value()) << "op '" << op.name << "': rank " << rank_ << " runs it without the table";
      Op& local = local_op(id);
      local.attrs.vocab_start = r->begin[0];
      local.attrs.outside_ids_are_zero = r->extent(0) < shape[0].evaluate({});
    }
    if (auto logits = graph::loss_logits(graph_, op, [&](TensorRef t) { return annotation(t); })) {
      set_vocab_shard(id, *logits);
    }
  }
  data_group_ = specialize::data_group(placeholders, rank_);
  steps_.emplace(graph_, forward_, backward_, graph::StepPlanOptions{.recompute = plan_->recompute});
}

}  // namespace hspmd::specialize
