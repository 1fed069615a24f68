// Causal varlen attention over tokens addressed by their packed position (context parallelism,
// docs/context-parallelism.md; kernels/context_attention.h), attrs.scale and attrs.window as for
// attention:
//   context_attention(q [T, Nq, D], k [T, Nkv, D], v [T, Nkv, D], cu_seqlens [N + 1], q_index [T],
//                     kv_index [T]) -> (out [T, Nq, D], lse [Nq, T])
//   context_attention_bwd(q, k, v, cu_seqlens, q_index, kv_index, out, lse, dout) -> (dq, dk, dv)
// q_index / kv_index hold each row's position in the packed batch (the identity without CP).
// Deduction: the tokens of q may be split INSIDE a group (a CP split): then k and v must hold every
// token there (the same annotation with that split read as duplication: all-gathered by a Reshard
// before the op), q_index is split like q's tokens and kv_index, cu_seqlens hold every token. Across
// groups (hdim 0) tokens are data parallelism: every input is split alike, each group packing its own
// documents. Heads (dim 1) may be split in either tier (TP); D never; nothing may be partial.
// out is sharded like q, lse like q with dims 0 and 1 swapped. In the backward dk and dv are PARTIAL
// where q's tokens are split inside a group: each rank's share is what its own queries contribute,
// and the Reshard's backward sums them (a reduce-scatter). A window changes no rule (each rank
// still gathers every key; its kernel skips those outside its queries' windows).
#include "hspmd/core/error.h"
#include "hspmd/graph/ops.h"
#include "hspmd/graph/ops/op_defs.h"
#include "hspmd/kernels/context_attention.h"

namespace hspmd::graph {
namespace detail {

namespace {
void check_inputs(const ShapeContext& ctx) {
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
  for (int i : {3, 4, 5}) {
    expect_rank(ctx, i, 1);
    expect_integer(ctx, i);
  }
  expect_dim_eq(ctx, 0, 0, 4, 0);
  expect_dim_eq(ctx, 1, 0, 5, 0);
  expect_window(ctx);
}

// `a` with its bottom-tier entries mapped and its hdim kept (the top tier is data parallelism:
// every input is split across groups alike).
sharding::Annotation map_entries(const DeduceContext& ctx, const sharding::Annotation& a,
                                 const std::function<int(int)>& map) {
  sharding::Annotation out = map_dims(ctx, a, "q", map);
  return a.hsize() > 1 ? out.with_hdim(a.hdim()) : out;
}

// q's annotation after checking every input against it.
sharding::Annotation deduce_q(const DeduceContext& ctx) {
  expect_same_placement(ctx);
  const sharding::Annotation& q = ctx.inputs[0];
  sharding::Annotation out = map_dims(ctx, q, "q", [&](int dim) {
    HSPMD_CHECK(dim != sharding::kPartial && dim != 2)
        << ctx.where() << ": q " << q.to_string() << (dim == 2 ? " splits the head dim D" : " is partial")
        << "; insert a Reshard before input 0";
    return dim;
  });
  const sharding::Annotation all_tokens = map_entries(ctx, out, [](int d) { return d == 0 ? sharding::kDuplicate : d; });
  expect_annotation(ctx, 1, all_tokens);
  expect_annotation(ctx, 2, all_tokens);
  const sharding::Annotation whole = map_entries(ctx, out, [](int) { return sharding::kDuplicate; });
  expect_annotation(ctx, 3, whole);
  expect_annotation(ctx, 4, map_entries(ctx, out, [](int d) { return d == 0 ? 0 : sharding::kDuplicate; }));
  expect_annotation(ctx, 5, whole);
  return out;
}

sharding::Annotation lse_annotation(const DeduceContext& ctx, const sharding::Annotation& q) {
  return map_dims(ctx, q, "q", [](int dim) { return dim == 0 ? 1 : dim == 1 ? 0 : dim; });
}
}  // namespace

OpDef context_attention_def() {
  OpDef d{OpKind::kContextAttention, "context_attention", 6, 2, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) {
    check_inputs(ctx);
    const TensorInfo& q = ctx.inputs[0];
    return std::vector<TensorInfo>{q, {SymShape{q.shape[1], q.shape[0]}, q.dtype}};
  };
  d.grad = [](GradContext& c) {
    OpAttrs a;
    a.scale = c.op.attrs.scale;
    a.bf16_operands = c.op.attrs.bf16_operands;
    a.window = c.op.attrs.window;
    auto g = c.graph.add_op(OpKind::kContextAttentionBwd, c.name("bwd"),
                            {c.input(0), c.input(1), c.input(2), c.input(3), c.input(4), c.input(5), c.output(0),
                             c.output(1), c.output_grads[0]},
                            a);
    return std::vector<TensorRef>{g[0], g[1], g[2], TensorRef{}, TensorRef{}, TensorRef{}};
  };
  d.deduce = [](const DeduceContext& ctx) {
    sharding::Annotation q = deduce_q(ctx);
    return std::vector<sharding::Annotation>{q, lse_annotation(ctx, q)};
  };
  return d;
}

OpDef context_attention_bwd_def() {
  OpDef d{OpKind::kContextAttentionBwd, "context_attention_bwd", 9, 3, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) {
    check_inputs(ctx);
    expect_same_shape(ctx, 0, 6);
    expect_same_shape(ctx, 0, 8);
    return std::vector<TensorInfo>{ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]};
  };
  d.deduce = [](const DeduceContext& ctx) {
    sharding::Annotation q = deduce_q(ctx);
    expect_annotation(ctx, 6, q);
    expect_annotation(ctx, 7, lse_annotation(ctx, q));
    expect_annotation(ctx, 8, q);
    // Each rank's keys gradient sums its own queries' terms: partial over a CP split of the tokens.
    const sharding::Annotation dkv = map_entries(ctx, q, [](int d) { return d == 0 ? sharding::kPartial : d; });
    return std::vector<sharding::Annotation>{q, dkv, dkv};
  };
  return d;
}

void add_context_attention_kernels(KernelRegistry& r) {
  r.add(OpKind::kContextAttention, DeviceType::kCPU, kFloat, [](KernelContext& k) {
    Tensor out = k.new_output(0), lse = k.new_output(1);
    const auto& in = k.inputs;
    kernels::context_attention_fwd(in[0], in[1], in[2], in[3], in[4], in[5], out, lse,
                                   attention_options(k.op.attrs));
    k.outputs = {out, lse};
  });
  r.add(OpKind::kContextAttentionBwd, DeviceType::kCPU, kFloat, [](KernelContext& k) {
    Tensor dq = k.new_output(0), dk = k.new_output(1), dv = k.new_output(2);
    const auto& in = k.inputs;
    kernels::context_attention_bwd(in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], dq, dk, dv,
                                   attention_options(k.op.attrs));
    k.outputs = {dq, dk, dv};
  });
}

}  // namespace detail

TensorRef ops::context_attention(Graph& g, TensorRef q, TensorRef k, TensorRef v, TensorRef cu_seqlens,
                                 TensorRef q_index, TensorRef kv_index, const std::string& name, double scale,
                                 bool bf16_operands, int64_t window) {
  OpAttrs a;
  a.scale = scale;
  a.bf16_operands = bf16_operands;
  a.window = window;
  return g.add_op(OpKind::kContextAttention, name, {q, k, v, cu_seqlens, q_index, kv_index}, a)[0];
}

}  // namespace hspmd::graph
