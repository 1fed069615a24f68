// Embedding lookup (attrs.vocab_start, attrs.outside_ids_are_zero: a vocab-parallel shard):
//   embedding(table [V, H], ids [T])      -> y [T, H]
//   embedding_bwd(ids [T], dy [T, H])     -> dtable [V, H]   (attrs.shape = the table's shape)
#include "hspmd/core/error.h"
#include "hspmd/graph/ops.h"
#include "hspmd/graph/ops/op_defs.h"
#include "hspmd/kernels/embedding.h"

namespace hspmd::graph {
namespace detail {

namespace {
kernels::EmbeddingOptions options(const OpAttrs& a) {
  return {.vocab_start = a.vocab_start, .outside_ids_are_zero = a.outside_ids_are_zero};
}
}  // namespace

OpDef embedding_def() {
  OpDef d{OpKind::kEmbedding, "embedding", 2, 1, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) {
    expect_rank(ctx, 0, 2);
    expect_floating(ctx, 0);
    expect_rank(ctx, 1, 1);
    expect_integer(ctx, 1);
    return std::vector<TensorInfo>{{SymShape{ctx.inputs[1].shape[0], ctx.inputs[0].shape[1]}, ctx.inputs[0].dtype}};
  };
  d.run = [](KernelContext& k) {
    Tensor y = k.new_output(0);
    kernels::embedding_fwd(k.inputs[0], k.inputs[1], y, options(k.op.attrs));
    k.outputs = {y};
  };
  d.grad = [](GradContext& c) {
    OpAttrs a = c.op.attrs;
    a.shape = c.graph.info(c.input(0)).shape;
    TensorRef dtable = c.graph.add_op1(OpKind::kEmbeddingBwd, c.name("bwd"), {c.input(1), c.output_grads[0]}, a);
    return std::vector<TensorRef>{dtable, TensorRef{}};
  };
  return d;
}

OpDef embedding_bwd_def() {
  OpDef d{OpKind::kEmbeddingBwd, "embedding_bwd", 2, 1, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) {
    expect_rank(ctx, 0, 1);
    expect_integer(ctx, 0);
    expect_rank(ctx, 1, 2);
    expect_floating(ctx, 1);
    expect_dim_eq(ctx, 0, 0, 1, 0);
    const SymShape& table = ctx.op.attrs.shape;
    HSPMD_CHECK(table.size() == 2 && table[1] == ctx.inputs[1].shape[1])
        << ctx.where() << ": table shape " << to_string(table) << " does not match dy " << to_string(ctx.inputs[1].shape);
    return std::vector<TensorInfo>{{table, ctx.inputs[1].dtype}};
  };
  d.run = [](KernelContext& k) {
    Tensor dtable = k.new_output(0);
    kernels::embedding_bwd(k.inputs[0], k.inputs[1], dtable, options(k.op.attrs));
    k.outputs = {dtable};
  };
  return d;
}

}  // namespace detail

TensorRef ops::embedding(Graph& g, TensorRef table, TensorRef ids, const std::string& name) {
  return g.add_op1(OpKind::kEmbedding, name, {table, ids});
}

}  // namespace hspmd::graph
