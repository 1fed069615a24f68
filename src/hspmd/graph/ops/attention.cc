// Causal varlen attention with grouped-query heads (attrs.scale, 0 = 1/sqrt(D); attrs.window, the
// sliding window of kernels/attention.h, 0 = none):
//   attention(q [T, Nq, D], k [T, Nkv, D], v [T, Nkv, D], cu_seqlens [N + 1])
//       -> (out [T, Nq, D], lse [Nq, T])      lse saved for the backward
//   attention_bwd(q, k, v, cu_seqlens, out, lse, dout) -> (dq, dk, dv)
// Tokens attend only within their own sequence of the packed batch (cu_seqlens offsets).
// Deduction: q, k, v share one annotation. Heads (dim 1) may be split in either tier (tensor
// parallelism: GQA needs the degree to divide Nkv too, checked when shapes are bound). The token
// dim T of a packed batch must not be split inside a group: a device would see only some
// tokens of a sequence (context parallelism is not supported); across groups (hdim 0) it is data
// parallelism, each group packing its own whole sequences and feeding its own cu_seqlens, which
// is then annotated hdim 0 as well (duplicated otherwise). D is never split, and nothing may be
// partial (softmax is not linear). out is sharded like q; lse [Nq, T] like q with dims swapped.
// A window changes no rule: heads stay independent and a group still holds whole sequences.
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
  expect_window(ctx);
  HSPMD_CHECK(!ctx.op.attrs.bf16_operands || ctx.inputs[0].dtype == DType::kFloat32)
      << ctx.where() << ": bf16 operands are rounded from float32, q is " << dtype_name(ctx.inputs[0].dtype);
}

// The annotation shared by q, k, v (and out, dout in the backward), after checking it.
sharding::Annotation deduce_qkv(const DeduceContext& ctx) {
  expect_same_placement(ctx);
  const sharding::Annotation& q = ctx.inputs[0];
  sharding::Annotation out = map_dims(ctx, q, "q", [&](int dim) {
    HSPMD_CHECK(dim != sharding::kPartial && dim != 2)
        << ctx.where() << ": q " << q.to_string() << (dim == 2 ? " splits the head dim D" : " is partial")
        << "; insert a Reshard before input 0";
    return dim;
  });
  for (const sharding::DistState& ds : out.ds_union()) {
    HSPMD_CHECK(ds.degree(0) == 1) << ctx.where() << ": q " << q.to_string()
                                   << " splits the tokens of a packed batch inside a group (sequences would be cut);"
                                   << " split heads (dim 1) or split tokens across groups (hdim 0) instead";
  }
  expect_annotation(ctx, 1, out);
  expect_annotation(ctx, 2, out);
  expect_annotation(ctx, 3, map_dims(ctx, out, "q", [](int dim) { return dim == 0 ? 0 : sharding::kDuplicate; }));
  return out;
}

sharding::Annotation lse_annotation(const DeduceContext& ctx, const sharding::Annotation& q) {
  return map_dims(ctx, q, "q", [](int dim) { return dim == 0 ? 1 : dim == 1 ? 0 : dim; });
}
}  // namespace

kernels::AttentionOptions attention_options(const OpAttrs& attrs) {
  return {.scale = attrs.scale, .bf16_operands = attrs.bf16_operands, .window = attrs.window};
}

void expect_window(const ShapeContext& ctx) {
  HSPMD_CHECK(ctx.op.attrs.window >= 0) << ctx.where() << ": window " << ctx.op.attrs.window
                                        << " must be >= 0 (0: no sliding window)";
}

OpDef attention_def() {
  OpDef d{OpKind::kAttention, "attention", 4, 2, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) {
    check_qkv(ctx);
    const TensorInfo& q = ctx.inputs[0];
    return std::vector<TensorInfo>{q, {SymShape{q.shape[1], q.shape[0]}, q.dtype}};
  };
  d.grad = [](GradContext& c) {
    OpAttrs a;
    a.scale = c.op.attrs.scale;
    a.bf16_operands = c.op.attrs.bf16_operands;
    a.window = c.op.attrs.window;
    auto g = c.graph.add_op(OpKind::kAttentionBwd, c.name("bwd"),
                            {c.input(0), c.input(1), c.input(2), c.input(3), c.output(0), c.output(1),
                             c.output_grads[0]},
                            a);
    return std::vector<TensorRef>{g[0], g[1], g[2], TensorRef{}};
  };
  d.deduce = [](const DeduceContext& ctx) {
    sharding::Annotation q = deduce_qkv(ctx);
    return std::vector<sharding::Annotation>{q, lse_annotation(ctx, q)};
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
  d.deduce = [](const DeduceContext& ctx) {
    sharding::Annotation q = deduce_qkv(ctx);
    expect_annotation(ctx, 4, q);
    expect_annotation(ctx, 5, lse_annotation(ctx, q));
    expect_annotation(ctx, 6, q);
    return std::vector<sharding::Annotation>{q, q, q};
  };
  return d;
}

void add_attention_kernels(KernelRegistry& r) {
  r.add(OpKind::kAttention, DeviceType::kCPU, kFloat, [](KernelContext& k) {
    Tensor out = k.new_output(0), lse = k.new_output(1);
    kernels::attention_fwd(k.inputs[0], k.inputs[1], k.inputs[2], k.inputs[3], out, lse, attention_options(k.op.attrs));
    k.outputs = {out, lse};
  });
  r.add(OpKind::kAttentionBwd, DeviceType::kCPU, kFloat, [](KernelContext& k) {
    Tensor dq = k.new_output(0), dk = k.new_output(1), dv = k.new_output(2);
    const auto& in = k.inputs;
    kernels::attention_bwd(in[0], in[1], in[2], in[3], in[4], in[5], in[6], dq, dk, dv,
                           attention_options(k.op.attrs));
    k.outputs = {dq, dk, dv};
  });
}

}  // namespace detail

TensorRef ops::attention(Graph& g, TensorRef q, TensorRef k, TensorRef v, TensorRef cu_seqlens,
                         const std::string& name, double scale, bool bf16_operands, int64_t window) {
  OpAttrs a;
  a.scale = scale;
  a.bf16_operands = bf16_operands;
  a.window = window;
  return g.add_op(OpKind::kAttention, name, {q, k, v, cu_seqlens}, a)[0];
}

}  // namespace hspmd::graph
