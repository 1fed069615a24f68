// Rotary position embedding, Hugging Face rotate-half convention (attrs.theta):
//   rope(x [T, N, D], positions [T])       -> y [T, N, D]
//   rope_bwd(dy [T, N, D], positions [T])  -> dx [T, N, D]   (rotation by the opposite angle)
// Deduction: a rotation is linear in x, so x may be partial; x may be split on tokens T or heads N
// but not on D (rotate-half pairs element i with i + D/2). positions must be split on T exactly
// where x is and duplicated elsewhere. The output is sharded like x.
#include "hspmd/core/error.h"
#include "hspmd/graph/ops.h"
#include "hspmd/graph/ops/op_defs.h"
#include "hspmd/kernels/rope.h"

namespace hspmd::graph {
namespace detail {

namespace {
std::vector<TensorInfo> infer_rope(const ShapeContext& ctx) {
  expect_rank(ctx, 0, 3);
  expect_floating(ctx, 0);
  expect_rank(ctx, 1, 1);
  expect_integer(ctx, 1);
  expect_dim_eq(ctx, 0, 0, 1, 0);
  const SymExpr& head_dim = ctx.inputs[0].shape[2];
  HSPMD_CHECK(!head_dim.is_constant() || head_dim.constant_value() % 2 == 0)
      << ctx.where() << ": head dim " << head_dim.to_string() << " must be even";
  HSPMD_CHECK(ctx.op.attrs.theta > 0) << ctx.where() << ": theta must be positive, got " << ctx.op.attrs.theta;
  return {ctx.inputs[0]};
}

std::vector<sharding::Annotation> deduce_rope(const DeduceContext& ctx) {
  expect_same_placement(ctx);
  sharding::Annotation x = map_dims(ctx, ctx.inputs[0], "x", [&](int dim) {
    HSPMD_CHECK(dim != 2) << ctx.where() << ": x " << ctx.inputs[0].to_string()
                          << " splits the head dim D (2); insert a Reshard before input 0";
    return dim;
  });
  expect_annotation(ctx, 1, map_dims(ctx, x, "x", [](int dim) { return dim == 0 ? 0 : sharding::kDuplicate; }));
  return {x};
}
}  // namespace

OpDef rope_def() {
  OpDef d{OpKind::kRope, "rope", 2, 1, infer_rope, nullptr, nullptr, nullptr};
  d.deduce = deduce_rope;
  d.run = [](KernelContext& k) {
    Tensor y = k.new_output(0);
    kernels::rope_fwd(k.inputs[0], k.inputs[1], k.op.attrs.theta, y);
    k.outputs = {y};
  };
  d.grad = [](GradContext& c) {
    OpAttrs a;
    a.theta = c.op.attrs.theta;
    TensorRef dx = c.graph.add_op1(OpKind::kRopeBwd, c.name("bwd"), {c.output_grads[0], c.input(1)}, a);
    return std::vector<TensorRef>{dx, TensorRef{}};
  };
  return d;
}

OpDef rope_bwd_def() {
  OpDef d{OpKind::kRopeBwd, "rope_bwd", 2, 1, infer_rope, nullptr, nullptr, nullptr};
  d.deduce = deduce_rope;
  d.run = [](KernelContext& k) {
    Tensor dx = k.new_output(0);
    kernels::rope_bwd(k.inputs[0], k.inputs[1], k.op.attrs.theta, dx);
    k.outputs = {dx};
  };
  return d;
}

}  // namespace detail

TensorRef ops::rope(Graph& g, TensorRef x, TensorRef positions, double theta, const std::string& name) {
  OpAttrs a;
  a.theta = theta;
  return g.add_op1(OpKind::kRope, name, {x, positions}, a);
}

}  // namespace hspmd::graph
