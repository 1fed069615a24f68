// Embedding lookup (attrs.vocab_start, attrs.outside_ids_are_zero: a vocab-parallel shard;
// attrs.padding_id: the id whose row gets no gradient):
//   embedding(table [V, H], ids [T])      -> y [T, H]
//   embedding_bwd(ids [T], dy [T, H])     -> dtable [V, H]   (attrs.shape = the table's shape)
// Deduction: a lookup is onehot(ids) [T, V] @ table [V, H], so the matmul table applies with ids'
// annotation standing for the one-hot matrix: a vocab-parallel table (S0) with duplicated ids gives
// a partial output (each shard contributes the rows it holds, zeros elsewhere); a table split on H
// gives an output split on H; ids split on T give an output split on T. The backward is
// onehot(ids)^T @ dy. For a vocab-parallel table (ids and dy duplicated) it yields dtable
// duplicated, not S0: every device holds the whole (identical) table gradient, and the gradient
// reshard to the table's S0 annotation is a local slice with no communication.
#include "hspmd/core/error.h"
#include "hspmd/graph/ops.h"
#include "hspmd/graph/ops/op_defs.h"
#include "hspmd/sharding/deduce.h"
#include "hspmd/kernels/embedding.h"

namespace hspmd::graph {
namespace detail {

namespace {
kernels::EmbeddingOptions options(const OpAttrs& a) {
  return {.vocab_start = a.vocab_start, .outside_ids_are_zero = a.outside_ids_are_zero, .padding_id = a.padding_id};
}
// The annotation of onehot(ids) [T, V] given that of ids [T]: the same (ids split on T -> rows);
// integer ids cannot be partial sums.
sharding::Annotation onehot_ids(const DeduceContext& ctx, int input) {
  return map_dims(ctx, ctx.inputs[input], "ids (input " + std::to_string(input) + ")", [&](int dim) {
    HSPMD_CHECK(dim != sharding::kPartial) << ctx.where() << ": token ids " << ctx.inputs[input].to_string()
                                           << " cannot be partial; insert a Reshard before input " << input;
    return dim;
  });
}
// A duplicated one-hot matrix can be cut along V for free (each device compares the ids with its
// own vocabulary range): where the table is split on V (vocab-parallel), the one-hot is taken
// split on V too, so the matmul table sees the contracted dim split on both sides -> partial.
sharding::Annotation vocab_sliced(const sharding::Annotation& onehot, const sharding::Annotation& table) {
  std::vector<sharding::DistState> states;
  for (int g = 0; g < onehot.hsize(); ++g) {
    std::vector<sharding::DistState::Entry> entries = onehot.ds(g).entries();
    const auto& te = table.ds(g).entries();
    for (size_t i = 0; i < entries.size() && i < te.size(); ++i) {
      if (entries[i].dim == sharding::kDuplicate && te[i].dim == 0 && te[i].degree == entries[i].degree) {
        entries[i].dim = 1;
      }
    }
    states.push_back(sharding::DistState::make(std::move(entries)));
  }
  const bool top = onehot.hsize() > 1 && onehot.hdim() == sharding::kDuplicate && table.hdim() == 0;
  return sharding::Annotation::make(onehot.dg_union(), std::move(states), top ? 1 : onehot.hdim());
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
  d.grad = [](GradContext& c) {
    OpAttrs a = c.op.attrs;
    a.shape = c.graph.info(c.input(0)).shape;
    TensorRef dtable = c.graph.add_op1(OpKind::kEmbeddingBwd, c.name("bwd"), {c.input(1), c.output_grads[0]}, a);
    return std::vector<TensorRef>{dtable, TensorRef{}};
  };
  d.deduce = [](const DeduceContext& ctx) {
    expect_same_placement(ctx);
    const sharding::Annotation ids = vocab_sliced(onehot_ids(ctx, 1), ctx.inputs[0]);
    return std::vector<sharding::Annotation>{sharding::deduce_matmul(op_label(ctx), ids, ctx.inputs[0], 2, false)};
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
  d.deduce = [](const DeduceContext& ctx) {
    expect_same_placement(ctx);
    const sharding::Annotation ids_t = transposed(ctx, onehot_ids(ctx, 0));
    return std::vector<sharding::Annotation>{sharding::deduce_matmul(op_label(ctx), ids_t, ctx.inputs[1], 2, false)};
  };
  return d;
}

void add_embedding_kernels(KernelRegistry& r) {
  r.add(OpKind::kEmbedding, DeviceType::kCPU, kFloat, [](KernelContext& k) {
    Tensor y = k.new_output(0);
    kernels::embedding_fwd(k.inputs[0], k.inputs[1], y, options(k.op.attrs));
    k.outputs = {y};
  });
  r.add(OpKind::kEmbeddingBwd, DeviceType::kCPU, kFloat, [](KernelContext& k) {
    Tensor dtable = k.new_output(0);
    kernels::embedding_bwd(k.inputs[0], k.inputs[1], dtable, options(k.op.attrs));
    k.outputs = {dtable};
  });
}

}  // namespace detail

TensorRef ops::embedding(Graph& g, TensorRef table, TensorRef ids, const std::string& name, int64_t padding_id) {
  OpAttrs a;
  a.padding_id = padding_id;
  return g.add_op1(OpKind::kEmbedding, name, {table, ids}, a);
}

}  // namespace hspmd::graph
