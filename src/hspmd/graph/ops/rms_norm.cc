// RMSNorm over the last dim (attrs.eps; attrs.weight_offset, y = x * rstd * (weight_offset + weight),
// 1 for Gemma's norms):
//   rms_norm(x [..., H], weight [H])            -> (y [..., H], rstd [...])   rstd saved for the backward
//   rms_norm_bwd(x, weight, rstd, dy)            -> (dx [..., H], dweight [H])
// Deduction: x may be split on any dim but the normalized H (sequence parallelism splits T) and
// must not be partial (the norm is not linear); the weight is duplicated. y and dx are sharded
// like x, rstd like x's leading dims. dweight sums over the leading dims, so each split of a
// leading dim (in either tier) becomes partial: x "(S0:2)" -> dweight "(P:2)". The backward is
// linear in dy, so dy may be partial where x is duplicated (the gradient arriving from a
// column-parallel matmul such as lm_head); dx and dweight are then partial there too. The weight
// offset changes no rule (it is added to the duplicated weight).
#include <cmath>

#include "hspmd/core/error.h"
#include "hspmd/graph/ops.h"
#include "hspmd/graph/ops/op_defs.h"
#include "hspmd/kernels/rms_norm.h"

namespace hspmd::graph {
namespace detail {

namespace {
void check_x_weight(const ShapeContext& ctx) {
  expect_floating(ctx, 0);
  expect_same_dtype(ctx, 0, 1);
  expect_rank(ctx, 1, 1);
  HSPMD_CHECK(!ctx.inputs[0].shape.empty()) << ctx.where() << ": x must have rank >= 1";
  expect_dim_eq(ctx, 0, static_cast<int>(ctx.inputs[0].shape.size()) - 1, 1, 0);
}
SymShape rows_of(const SymShape& x) { return SymShape(x.begin(), x.end() - 1); }

// x's annotation after checking it (rows of x: y, dx and rstd keep the same dims).
sharding::Annotation deduce_rows(const DeduceContext& ctx) {
  expect_same_placement(ctx);
  expect_all_dup(ctx, 1);
  const int h = static_cast<int>(ctx.infos[0].shape.size()) - 1;
  return map_dims(ctx, ctx.inputs[0], "x", [&](int dim) {
    HSPMD_CHECK(dim != sharding::kPartial && dim != h)
        << ctx.where() << ": x " << ctx.inputs[0].to_string() << " is "
        << (dim == h ? "split along the normalized dim " + std::to_string(h) : std::string("partial"))
        << "; insert a Reshard before input 0";
    return dim;
  });
}

// dx's annotation: x's, except positions where x is duplicated and dy (input 3) partial.
sharding::Annotation deduce_dx(const DeduceContext& ctx, const sharding::Annotation& x) {
  const sharding::Annotation& dy = ctx.inputs[3];
  auto fail = [&]() {
    HSPMD_THROW() << ctx.where() << ": dy " << dy.to_string() << " must be sharded like x " << x.to_string()
                  << " (or partial where x is duplicated); insert a Reshard before input 3";
  };
  auto combine = [&](int xd, int yd) {
    if (xd == yd) return xd;
    if (xd == sharding::kDuplicate && yd == sharding::kPartial) return yd;
    fail();
    return xd;
  };
  std::vector<sharding::DistState> states;
  for (int g = 0; g < x.hsize(); ++g) {
    const auto& xe = x.ds(g).entries();
    const auto& ye = dy.ds(g).entries();
    if (xe.size() != ye.size()) fail();
    std::vector<sharding::DistState::Entry> entries;
    for (size_t i = 0; i < xe.size(); ++i) {
      if (xe[i].degree != ye[i].degree) fail();
      entries.push_back({combine(xe[i].dim, ye[i].dim), xe[i].degree});
    }
    states.push_back(sharding::DistState::make(std::move(entries)));
  }
  return sharding::Annotation::make(x.dg_union(), std::move(states), combine(x.hdim(), dy.hdim()));
}
}  // namespace

OpDef rms_norm_def() {
  OpDef d{OpKind::kRmsNorm, "rms_norm", 2, 2, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) {
    check_x_weight(ctx);
    HSPMD_CHECK(ctx.op.attrs.eps > 0) << ctx.where() << ": eps must be positive, got " << ctx.op.attrs.eps;
    HSPMD_CHECK(std::isfinite(ctx.op.attrs.weight_offset))
        << ctx.where() << ": weight_offset must be finite, got " << ctx.op.attrs.weight_offset;
    const TensorInfo& x = ctx.inputs[0];
    return std::vector<TensorInfo>{x, {rows_of(x.shape), x.dtype}};
  };
  d.grad = [](GradContext& c) {
    OpAttrs a;
    a.eps = c.op.attrs.eps;
    a.weight_offset = c.op.attrs.weight_offset;
    auto g = c.graph.add_op(OpKind::kRmsNormBwd, c.name("bwd"), {c.input(0), c.input(1), c.output(1),
                                                                  c.output_grads[0]}, a);
    return std::vector<TensorRef>{g[0], g[1]};
  };
  d.deduce = [](const DeduceContext& ctx) {
    sharding::Annotation x = deduce_rows(ctx);
    return std::vector<sharding::Annotation>{x, x};
  };
  return d;
}

OpDef rms_norm_bwd_def() {
  OpDef d{OpKind::kRmsNormBwd, "rms_norm_bwd", 4, 2, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) {
    check_x_weight(ctx);
    expect_same_shape(ctx, 0, 3);
    HSPMD_CHECK(ctx.inputs[2].shape == rows_of(ctx.inputs[0].shape))
        << ctx.where() << ": rstd must be " << to_string(rows_of(ctx.inputs[0].shape));
    return std::vector<TensorInfo>{ctx.inputs[0], ctx.inputs[1]};
  };
  d.deduce = [](const DeduceContext& ctx) {
    sharding::Annotation x = deduce_rows(ctx);
    expect_annotation(ctx, 2, x);
    sharding::Annotation dx = deduce_dx(ctx, x);
    sharding::Annotation dw = map_dims(ctx, dx, "dx", [](int dim) { return dim >= 0 ? sharding::kPartial : dim; });
    return std::vector<sharding::Annotation>{dx, dw};
  };
  return d;
}

void add_rms_norm_kernels(KernelRegistry& r) {
  r.add(OpKind::kRmsNorm, DeviceType::kCPU, kFloat, [](KernelContext& k) {
    Tensor y = k.new_output(0), rstd = k.new_output(1);
    kernels::rms_norm_fwd(k.inputs[0], k.inputs[1], k.op.attrs.eps, y, rstd, k.op.attrs.weight_offset);
    k.outputs = {y, rstd};
  });
  r.add(OpKind::kRmsNormBwd, DeviceType::kCPU, kFloat, [](KernelContext& k) {
    Tensor dx = k.new_output(0), dw = k.new_output(1);
    kernels::rms_norm_bwd(k.inputs[0], k.inputs[1], k.inputs[2], k.inputs[3], dx, dw, k.op.attrs.weight_offset);
    k.outputs = {dx, dw};
  });
}

}  // namespace detail

TensorRef ops::rms_norm(Graph& g, TensorRef x, TensorRef weight, double eps, const std::string& name,
                        double weight_offset) {
  OpAttrs a;
  a.eps = eps;
  a.weight_offset = weight_offset;
  return g.add_op(OpKind::kRmsNorm, name, {x, weight}, a)[0];
}

}  // namespace hspmd::graph
