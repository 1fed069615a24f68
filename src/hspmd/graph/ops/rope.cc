// Rotary position embedding, Hugging Face rotate-half convention (attrs.inv_freq: D/2 inverse
// frequencies, unscaled theta^(-2i/D) or a scaled RoPE's, models/rope_parameters.h):
//   rope(x [T, N, D], positions [T])       -> y [T, N, D]
//   rope_bwd(dy [T, N, D], positions [T])  -> dx [T, N, D]   (rotation by the opposite angle)
// Deduction: a rotation is linear in x, so x may be partial; x may be split on tokens T or heads N
// but not on D (rotate-half pairs element i with i + D/2). positions must be split on T exactly
// where x is and duplicated elsewhere. The output is sharded like x.
#include <cmath>

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
  const std::vector<double>& inv_freq = ctx.op.attrs.inv_freq;
  HSPMD_CHECK(!head_dim.is_constant() || static_cast<int64_t>(inv_freq.size()) * 2 == head_dim.constant_value())
      << ctx.where() << ": " << inv_freq.size() << " inverse frequencies for head dim " << head_dim.to_string()
      << " (need one per rotate-half pair)";
  for (double f : inv_freq) HSPMD_CHECK(f > 0) << ctx.where() << ": inverse frequency " << f << " must be positive";
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
  OpDef d{OpKind::kRope, "rope", 2, 1, infer_rope, nullptr, nullptr};
  d.deduce = deduce_rope;
  d.grad = [](GradContext& c) {
    OpAttrs a;
    a.inv_freq = c.op.attrs.inv_freq;
    TensorRef dx = c.graph.add_op1(OpKind::kRopeBwd, c.name("bwd"), {c.output_grads[0], c.input(1)}, a);
    return std::vector<TensorRef>{dx, TensorRef{}};
  };
  return d;
}

OpDef rope_bwd_def() {
  OpDef d{OpKind::kRopeBwd, "rope_bwd", 2, 1, infer_rope, nullptr, nullptr};
  d.deduce = deduce_rope;
  return d;
}

void add_rope_kernels(KernelRegistry& r) {
  r.add(OpKind::kRope, DeviceType::kCPU, kFloat, [](KernelContext& k) {
    Tensor y = k.new_output(0);
    kernels::rope_fwd(k.inputs[0], k.inputs[1], k.op.attrs.inv_freq, y);
    k.outputs = {y};
  });
  r.add(OpKind::kRopeBwd, DeviceType::kCPU, kFloat, [](KernelContext& k) {
    Tensor dx = k.new_output(0);
    kernels::rope_bwd(k.inputs[0], k.inputs[1], k.op.attrs.inv_freq, dx);
    k.outputs = {dx};
  });
}

}  // namespace detail

TensorRef ops::rope(Graph& g, TensorRef x, TensorRef positions, std::vector<double> inv_freq, const std::string& name) {
  OpAttrs a;
  a.inv_freq = std::move(inv_freq);
  return g.add_op1(OpKind::kRope, name, {x, positions}, a);
}

TensorRef ops::rope(Graph& g, TensorRef x, TensorRef positions, double theta, const std::string& name) {
  const SymExpr& head_dim = g.info(x).shape.at(2);
  HSPMD_CHECK(head_dim.is_constant()) << name << ": rope by theta needs a constant head dim, x has "
                                      << head_dim.to_string();
  HSPMD_CHECK(theta > 0) << name << ": theta must be positive, got " << theta;
  const int64_t dim = head_dim.constant_value();
  std::vector<double> inv_freq(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) {
    inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(dim));
  }
  return rope(g, x, positions, std::move(inv_freq), name);
}

}  // namespace hspmd::graph
