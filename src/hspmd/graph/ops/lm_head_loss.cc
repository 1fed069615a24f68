// The lm head and the token cross-entropy as one op, whose logits are never a tensor of the graph
// (kernels/lm_head_loss.h computes them chunk by chunk, again in the backward):
//   lm_head_loss(x [T, H], w [V, H], targets [T], loss_scale [])  -> (loss [], lse [T])
//       loss = loss_scale * sum_t cross_entropy(x[t] @ w^T, targets[t])      (= cross_entropy(matmul(x, w^T)))
//   lm_head_loss_bwd(x, w, targets, lse, loss_scale, dloss [])     -> (dx [T, H], dw [V, H])
// attrs: ignore_index, softcap (the logits soft-capped first, as cross_entropy's), bf16_operands
// (the products' operands, as matmul's), and vocab_start /
// vocab_size set per rank by specialize::ExecGraph under vocabulary parallelism.
// Deduction: the logits' annotation is what matmul(x, w^T) would deduce (sharding::deduce_matmul),
// and from there the rules of cross_entropy: w split on V inside a subgroup gives vocab-parallel
// logits, normalized across the shards with one statistics gather (the runtime's
// KernelContext::gather_vocab_shards); tokens split in either tier give a partial loss. The
// gradients are those of the two matmul products: dx = dlogits @ w (partial over a vocabulary
// split), dw = dlogits^T @ x (partial over a token split).
#include "hspmd/core/error.h"
#include "hspmd/graph/ops.h"
#include "hspmd/graph/ops/op_defs.h"
#include "hspmd/graph/token_loss.h"
#include "hspmd/kernels/lm_head_loss.h"
#include "hspmd/sharding/deduce.h"

namespace hspmd::graph {
namespace detail {
namespace {

// x [T, H], w [V, H], targets [T] (inputs 0-2) and the scalars at `scalars`.
void check_head_inputs(const ShapeContext& ctx, std::initializer_list<int> scalars) {
  expect_rank(ctx, 0, 2);
  expect_floating(ctx, 0);
  expect_rank(ctx, 1, 2);
  expect_same_dtype(ctx, 0, 1);
  expect_dim_eq(ctx, 0, 1, 1, 1);
  expect_rank(ctx, 2, 1);
  expect_integer(ctx, 2);
  expect_dim_eq(ctx, 0, 0, 2, 0);
  for (int i : scalars) {
    expect_rank(ctx, i, 0);
    expect_same_dtype(ctx, 0, i);
  }
  HSPMD_CHECK(!ctx.op.attrs.bf16_operands || ctx.inputs[0].dtype == DType::kFloat32)
      << ctx.where() << ": bf16 operands are rounded from float32, input 0 is " << dtype_name(ctx.inputs[0].dtype);
  expect_softcap(ctx);
}

// Where a Reshard fixes the logits' layout: the product's operands.
constexpr const char* kLogitsSource = "input 0 (x) or 1 (w), whose product are the logits";

kernels::LmHeadLossOptions head_options(const KernelContext& k) {
  return {.loss = token_loss_options(k.op.attrs), .bf16_operands = k.op.attrs.bf16_operands, .allocator = k.allocator};
}

}  // namespace

OpDef lm_head_loss_def() {
  OpDef d{OpKind::kLmHeadLoss, "lm_head_loss", 4, 2, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) {
    check_head_inputs(ctx, {3});
    const DType dt = ctx.inputs[0].dtype;
    return std::vector<TensorInfo>{{SymShape{}, dt}, {SymShape{ctx.inputs[0].shape[0]}, dt}};
  };
  d.grad = [](GradContext& c) {
    std::vector<TensorRef> g =
        c.graph.add_op(OpKind::kLmHeadLossBwd, c.name("bwd"),
                       {c.input(0), c.input(1), c.input(2), c.output(1), c.input(3), c.output_grads[0]}, c.op.attrs);
    return std::vector<TensorRef>{g[0], g[1], TensorRef{}, TensorRef{}};
  };
  d.deduce = [](const DeduceContext& ctx) {
    expect_same_placement(ctx);
    const sharding::Annotation logits = lm_head_logits(op_label(ctx), ctx.inputs[0], ctx.inputs[1]);
    sharding::Annotation rows = deduce_loss_rows(ctx, logits, 2, 3, kLogitsSource);
    return std::vector<sharding::Annotation>{deduce_loss_sum(ctx, rows), rows};
  };
  return d;
}

OpDef lm_head_loss_bwd_def() {
  OpDef d{OpKind::kLmHeadLossBwd, "lm_head_loss_bwd", 6, 2, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) {
    check_head_inputs(ctx, {4, 5});
    expect_rank(ctx, 3, 1);
    expect_dim_eq(ctx, 0, 0, 3, 0);
    return std::vector<TensorInfo>{ctx.inputs[0], ctx.inputs[1]};
  };
  d.deduce = [](const DeduceContext& ctx) {
    expect_same_placement(ctx);
    const std::string label = op_label(ctx);
    const sharding::Annotation logits = lm_head_logits(label, ctx.inputs[0], ctx.inputs[1]);
    expect_annotation(ctx, 3, deduce_loss_rows(ctx, logits, 2, 4, kLogitsSource));  // lse like the targets
    expect_all_dup(ctx, 5);
    // dlogits are annotated like the logits; the two products of matmul's gradient.
    return std::vector<sharding::Annotation>{
        sharding::deduce_matmul(label, logits, ctx.inputs[1], 2, false),
        sharding::deduce_matmul(label, transposed(ctx, logits), ctx.inputs[0], 2, false)};
  };
  return d;
}

void add_lm_head_loss_kernels(KernelRegistry& r) {
  r.add(OpKind::kLmHeadLoss, DeviceType::kCPU, kFloat, [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    Tensor stats = Tensor::empty(Shape{3, x.dim(0)}, DType::kFloat64, k.allocator);
    kernels::lm_head_loss_stats(x, k.inputs[1], k.inputs[2], stats, head_options(k));
    finish_token_loss(k, stats, k.inputs[2], k.inputs[3]);
  });
  r.add(OpKind::kLmHeadLossBwd, DeviceType::kCPU, kFloat, [](KernelContext& k) {
    const std::vector<Tensor>& in = k.inputs;
    Tensor dx = k.new_output(0), dw = k.new_output(1);
    const Tensor dlosses = token_loss_grads(k, in[0].dtype(), in[4], in[5]);
    kernels::lm_head_loss_bwd(in[0], in[1], in[2], in[3], dlosses, dx, dw, head_options(k));
    k.outputs = {dx, dw};
  });
}

}  // namespace detail

TensorRef ops::lm_head_loss(Graph& g, TensorRef x, TensorRef w, TensorRef targets, TensorRef loss_scale,
                            int64_t ignore_index, bool bf16_operands, const std::string& name, double softcap) {
  OpAttrs a;
  a.ignore_index = ignore_index;
  a.softcap = softcap;
  a.bf16_operands = bf16_operands;
  return g.add_op(OpKind::kLmHeadLoss, name, {x, w, targets, loss_scale}, a)[0];
}

}  // namespace hspmd::graph
