// RMSNorm over the last dim (attrs.eps):
//   rms_norm(x [..., H], weight [H])            -> (y [..., H], rstd [...])   rstd saved for the backward
//   rms_norm_bwd(x, weight, rstd, dy)            -> (dx [..., H], dweight [H])
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
}  // namespace

OpDef rms_norm_def() {
  OpDef d{OpKind::kRmsNorm, "rms_norm", 2, 2, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) {
    check_x_weight(ctx);
    HSPMD_CHECK(ctx.op.attrs.eps > 0) << ctx.where() << ": eps must be positive, got " << ctx.op.attrs.eps;
    const TensorInfo& x = ctx.inputs[0];
    return std::vector<TensorInfo>{x, {rows_of(x.shape), x.dtype}};
  };
  d.run = [](KernelContext& k) {
    Tensor y = k.new_output(0), rstd = k.new_output(1);
    kernels::rms_norm_fwd(k.inputs[0], k.inputs[1], k.op.attrs.eps, y, rstd);
    k.outputs = {y, rstd};
  };
  d.grad = [](GradContext& c) {
    OpAttrs a;
    a.eps = c.op.attrs.eps;
    auto g = c.graph.add_op(OpKind::kRmsNormBwd, c.name("bwd"), {c.input(0), c.input(1), c.output(1),
                                                                  c.output_grads[0]}, a);
    return std::vector<TensorRef>{g[0], g[1]};
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
  d.run = [](KernelContext& k) {
    Tensor dx = k.new_output(0), dw = k.new_output(1);
    kernels::rms_norm_bwd(k.inputs[0], k.inputs[1], k.inputs[2], k.inputs[3], dx, dw);
    k.outputs = {dx, dw};
  };
  return d;
}

}  // namespace detail

TensorRef ops::rms_norm(Graph& g, TensorRef x, TensorRef weight, double eps, const std::string& name) {
  OpAttrs a;
  a.eps = eps;
  return g.add_op(OpKind::kRmsNorm, name, {x, weight}, a)[0];
}

}  // namespace hspmd::graph
