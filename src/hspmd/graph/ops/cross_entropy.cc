// Token cross-entropy summed and scaled (attrs.ignore_index; attrs.softcap > 0: the logits are
// soft-capped first, softcap * tanh(logits / softcap), and dlogits are those of the raw logits):
//   cross_entropy(logits [T, V], targets [T], loss_scale [])  -> (loss [], lse [T])
//       loss = loss_scale * sum_t (logsumexp(logits[t]) - logits[t, targets[t]])   (ignored tokens add 0)
//   cross_entropy_bwd(logits, targets, lse, loss_scale, dloss [])  -> dlogits [T, V]
// A sum times a runtime scale, not a mean: the caller feeds 1 / (global token count), so every
// micro-batch and pipeline weighs each token the same (architecture §9).
// Deduction: logits may be split on tokens T in either tier (targets and lse split alike); the
// summed loss is then partial over those splits: logits "split0{[0]();[1]()}" -> loss
// "partial{[0]();[1]()}". loss_scale and dloss are duplicated. Partial logits are an error (not
// linear).
// Vocab-parallel: logits split on the vocabulary V inside a subgroup (the output of a vocab-parallel
// lm_head) are normalized over the whole row. Each rank computes its shard's row statistics (max,
// sum of exponentials, the target's logit if it holds it), the runtime gathers them over the ranks
// that share the rows (KernelContext::gather_vocab_shards: one all-gather of 3 float64 per token),
// and every shard combines them into the same loss and lse. Targets, lse and loss are then
// duplicated over the vocabulary split: "S1:2" logits -> "D:2" targets, lse and loss. The backward
// needs no communication: each shard's dlogits use the whole-row lse. Ranks learn their vocabulary
// range from attrs.vocab_start / vocab_size (set per rank by specialize::ExecGraph). Soft-capping
// is elementwise, so it changes no rule (each shard caps its own columns).
#include <cmath>

#include "hspmd/core/error.h"
#include "hspmd/graph/ops.h"
#include "hspmd/graph/ops/op_defs.h"
#include "hspmd/kernels/cross_entropy.h"
#include "hspmd/kernels/reduce.h"

namespace hspmd::graph {
namespace detail {

namespace {
void check_logits_targets(const ShapeContext& ctx) {
  expect_rank(ctx, 0, 2);
  expect_floating(ctx, 0);
  expect_rank(ctx, 1, 1);
  expect_integer(ctx, 1);
  expect_dim_eq(ctx, 0, 0, 1, 0);
  expect_softcap(ctx);
}
void check_scalar(const ShapeContext& ctx, int i) {
  expect_rank(ctx, i, 0);
  expect_same_dtype(ctx, 0, i);
}
}  // namespace

void expect_softcap(const ShapeContext& ctx) {
  const double cap = ctx.op.attrs.softcap;
  HSPMD_CHECK(cap >= 0 && std::isfinite(cap)) << ctx.where() << ": softcap " << cap
                                              << " must be finite and >= 0 (0: no soft-capping)";
}

kernels::CrossEntropyOptions token_loss_options(const OpAttrs& a) {
  return {.ignore_index = a.ignore_index, .vocab_start = a.vocab_start, .vocab_size = a.vocab_size,
          .softcap = a.softcap};
}

void finish_token_loss(KernelContext& k, Tensor stats, const Tensor& targets, const Tensor& loss_scale) {
  Tensor loss = k.new_output(0), lse = k.new_output(1);
  Tensor losses = Tensor::empty(Shape{targets.numel()}, loss.dtype(), k.allocator);
  // A shard normalized over its own columns alone would give a plausible, wrong loss.
  HSPMD_CHECK(k.op.attrs.vocab_size == 0 || k.gather_vocab_shards)
      << k.op.name << ": this rank holds vocabulary columns from " << k.op.attrs.vocab_start << " of "
      << k.op.attrs.vocab_size << " but was given no way to gather the other shards' statistics";
  if (k.gather_vocab_shards) stats = k.gather_vocab_shards(stats);
  kernels::cross_entropy_combine(stats, targets, losses, lse, token_loss_options(k.op.attrs));
  loss.fill(loss_scale.element_as_double(0) * kernels::sum_all(losses));
  k.outputs = {loss, lse};
}

Tensor token_loss_grads(const KernelContext& k, DType dtype, const Tensor& loss_scale, const Tensor& dloss) {
  // d loss / d losses[t] = dloss * loss_scale for every token.
  const double per_token = dloss.element_as_double(0) * loss_scale.element_as_double(0);
  return Tensor::full(Shape{k.inputs[0].dim(0)}, dtype, per_token, k.allocator);
}

sharding::Annotation deduce_loss_rows(const DeduceContext& ctx, const sharding::Annotation& logits, int targets,
                                      int scale, const std::string& source) {
  expect_same_placement(ctx);
  HSPMD_CHECK(logits.hsize() == 1 || logits.hdim() != 1)
      << ctx.where() << ": logits " << logits.to_string() << " split the vocabulary across subgroups; insert a Reshard before "
      << source << " that splits it inside each";
  sharding::Annotation rows = map_dims(ctx, logits, "logits", [&](int dim) {
    HSPMD_CHECK(dim != sharding::kPartial) << ctx.where() << ": logits " << logits.to_string()
                                           << " are partial; insert a Reshard before " << source << " that sums them";
    return dim == 1 ? sharding::kDuplicate : dim;
  });
  expect_annotation(ctx, targets, rows);
  expect_all_dup(ctx, scale);
  return rows;
}

sharding::Annotation deduce_loss_sum(const DeduceContext& ctx, const sharding::Annotation& rows) {
  return map_dims(ctx, rows, "targets", [](int dim) { return dim == 0 ? sharding::kPartial : dim; });
}

OpDef cross_entropy_def() {
  OpDef d{OpKind::kCrossEntropy, "cross_entropy", 3, 2, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) {
    check_logits_targets(ctx);
    check_scalar(ctx, 2);
    DType dt = ctx.inputs[0].dtype;
    return std::vector<TensorInfo>{{SymShape{}, dt}, {SymShape{ctx.inputs[0].shape[0]}, dt}};
  };
  d.grad = [](GradContext& c) {
    TensorRef dlogits = c.graph.add_op1(
        OpKind::kCrossEntropyBwd, c.name("bwd"),
        {c.input(0), c.input(1), c.output(1), c.input(2), c.output_grads[0]}, c.op.attrs);
    return std::vector<TensorRef>{dlogits, TensorRef{}, TensorRef{}};
  };
  d.deduce = [](const DeduceContext& ctx) {
    sharding::Annotation rows = deduce_loss_rows(ctx, ctx.inputs[0], 1, 2, "input 0");
    return std::vector<sharding::Annotation>{deduce_loss_sum(ctx, rows), rows};
  };
  return d;
}

OpDef cross_entropy_bwd_def() {
  OpDef d{OpKind::kCrossEntropyBwd, "cross_entropy_bwd", 5, 1, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) {
    check_logits_targets(ctx);
    expect_rank(ctx, 2, 1);
    expect_dim_eq(ctx, 0, 0, 2, 0);
    check_scalar(ctx, 3);
    check_scalar(ctx, 4);
    return std::vector<TensorInfo>{ctx.inputs[0]};
  };
  d.deduce = [](const DeduceContext& ctx) {
    sharding::Annotation rows = deduce_loss_rows(ctx, ctx.inputs[0], 1, 3, "input 0");
    expect_annotation(ctx, 2, rows);  // lse [T] like the targets
    expect_all_dup(ctx, 4);
    return std::vector<sharding::Annotation>{ctx.inputs[0]};
  };
  return d;
}

void add_cross_entropy_kernels(KernelRegistry& r) {
  r.add(OpKind::kCrossEntropy, DeviceType::kCPU, kFloat, [](KernelContext& k) {
    const Tensor& logits = k.inputs[0];
    Tensor stats = Tensor::empty(Shape{3, logits.dim(0)}, DType::kFloat64, k.allocator);
    kernels::cross_entropy_shard_stats(logits, k.inputs[1], stats, token_loss_options(k.op.attrs));
    finish_token_loss(k, stats, k.inputs[1], k.inputs[2]);
  });
  r.add(OpKind::kCrossEntropyBwd, DeviceType::kCPU, kFloat, [](KernelContext& k) {
    const Tensor& logits = k.inputs[0];
    Tensor dlogits = k.new_output(0);
    const Tensor dlosses = token_loss_grads(k, logits.dtype(), k.inputs[3], k.inputs[4]);
    kernels::cross_entropy_bwd(logits, k.inputs[1], k.inputs[2], dlosses, dlogits, token_loss_options(k.op.attrs));
    k.outputs = {dlogits};
  });
}

}  // namespace detail

TensorRef ops::cross_entropy(Graph& g, TensorRef logits, TensorRef targets, TensorRef loss_scale,
                             int64_t ignore_index, const std::string& name, double softcap) {
  OpAttrs a;
  a.ignore_index = ignore_index;
  a.softcap = softcap;
  return g.add_op(OpKind::kCrossEntropy, name, {logits, targets, loss_scale}, a)[0];
}

}  // namespace hspmd::graph
