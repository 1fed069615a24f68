// Causal varlen attention with grouped-query heads (attrs.scale, 0 = 1/sqrt(D)):
//   attention(q [T, Nq, D], k [T, Nkv, D], v [T, Nkv, D], cu_seqlens [N + 1])
//       -> (out [T, Nq, D], lse [Nq, T])      lse saved for the backward
//   attention_bwd(q, k, v, cu_seqlens, out, lse, dout) -> (dq, dk, dv)
// Tokens attend only within their own sequence of the packed batch (cu_seqlens offsets).
#include "hspmd/core/error.h"
#include "hspmd/graph/ops.h"
#include "hspmd/graph/ops/op_defs.h"
#include "hspmd/kernels/attention.h"

namespace hspmd::graph {
namespace detail {

namespace {
void check_qkv(const ShapeContext& ctx) {
  for (int i : {0, 1, 2}) {
    expect_rank(ctx, i, 3);
    expect_floating(ctx, i);
    expect_same_dtype(ctx, 0, i);
  }
  expect_same_shape(ctx, 1, 2);
  expect_dim_eq(ctx, 0, 0, 1, 0);
  expect_dim_eq(ctx, 0, 2, 1, 2);
  const SymExpr& nq = ctx.inputs[0].shape[1];
  const SymExpr& nkv = ctx.inputs[1].shape[1];
  HSPMD_CHECK(!nq.is_constant() || !nkv.is_constant() || nq.constant_value() % nkv.constant_value() == 0)
      << ctx.where() << ": kv heads " << nkv.to_string() << " must divide query heads " << nq.to_string();
  expect_rank(ctx, 3, 1);
  expect_integer(ctx, 3);
}
}  // namespace

OpDef attention_def() {
  OpDef d{OpKind::kAttention, "attention", 4, 2, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) {
    check_qkv(ctx);
    const TensorInfo& q = ctx.inputs[0];
    return std::vector<TensorInfo>{q, {SymShape{q.shape[1], q.shape[0]}, q.dtype}};
  };
  d.run = [](KernelContext& k) {
    Tensor out = k.new_output(0), lse = k.new_output(1);
    kernels::attention_fwd(k.inputs[0], k.inputs[1], k.inputs[2], k.inputs[3], out, lse, {.scale = k.op.attrs.scale});
    k.outputs = {out, lse};
  };
  d.grad = [](GradContext& c) {
    OpAttrs a;
    a.scale = c.op.attrs.scale;
    auto g = c.graph.add_op(OpKind::kAttentionBwd, c.name("bwd"),
                            {c.input(0), c.input(1), c.input(2), c.input(3), c.output(0), c.output(1),
                             c.output_grads[0]},
                            a);
    return std::vector<TensorRef>{g[0], g[1], g[2], TensorRef{}};
  };
  return d;
}

OpDef attention_bwd_def() {
  OpDef d{OpKind::kAttentionBwd, "attention_bwd", 7, 3, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) {
    check_qkv(ctx);
    expect_same_shape(ctx, 0, 4);
    expect_same_shape(ctx, 0, 6);
    return std::vector<TensorInfo>{ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]};
  };
  d.run = [](KernelContext& k) {
    Tensor dq = k.new_output(0), dk = k.new_output(1), dv = k.new_output(2);
    const auto& in = k.inputs;
    kernels::attention_bwd(in[0], in[1], in[2], in[3], in[4], in[5], in[6], dq, dk, dv, {.scale = k.op.attrs.scale});
    k.outputs = {dq, dk, dv};
  };
  return d;
}

}  // namespace detail

TensorRef ops::attention(Graph& g, TensorRef q, TensorRef k, TensorRef v, TensorRef cu_seqlens,
                         const std::string& name, double scale) {
  OpAttrs a;
  a.scale = scale;
  return g.add_op(OpKind::kAttention, name, {q, k, v, cu_seqlens}, a)[0];
}

}  // namespace hspmd::graph
