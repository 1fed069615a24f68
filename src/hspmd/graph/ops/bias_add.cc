// Bias of a linear layer (Hugging Face attention_bias / mlp_bias):
//   bias_add(x [..., N], bias [N])  -> x + bias          (bias broadcast over the leading dims)
//   bias_add_bwd(dy [..., N])       -> dbias [N]          (dy summed over the leading dims)
// Deduction: the bias follows x's last dim: split where x is split on N (a column-parallel
// projection's output, "(S1:tp)" -> bias "(S0:tp)"), duplicated elsewhere; x must not be partial,
// since each partial summand would add the bias once (a row-parallel projection adds its bias
// after the all-reduce). dbias sums over the leading dims, so each split of one (in either tier)
// becomes partial, and a partial dy gives a partial dbias.
#include "hspmd/core/error.h"
#include "hspmd/graph/ops.h"
#include "hspmd/graph/ops/op_defs.h"
#include "hspmd/kernels/bias.h"
#include "hspmd/kernels/reduce.h"

namespace hspmd::graph {
namespace detail {

namespace {
int last_dim(const DeduceContext& ctx) { return static_cast<int>(ctx.infos[0].shape.size()) - 1; }

std::vector<TensorInfo> infer_bias_add(const ShapeContext& ctx) {
  expect_floating(ctx, 0);
  expect_same_dtype(ctx, 0, 1);
  expect_rank(ctx, 1, 1);
  HSPMD_CHECK(!ctx.inputs[0].shape.empty()) << ctx.where() << ": x must have rank >= 1";
  expect_dim_eq(ctx, 0, static_cast<int>(ctx.inputs[0].shape.size()) - 1, 1, 0);
  return {ctx.inputs[0]};
}
}  // namespace

OpDef bias_add_def() {
  OpDef d{OpKind::kBiasAdd, "bias_add", 2, 1, infer_bias_add, nullptr, nullptr};
  d.grad = [](GradContext& c) {
    TensorRef dbias = c.graph.add_op1(OpKind::kBiasAddBwd, c.name("bwd"), {c.output_grads[0]});
    return std::vector<TensorRef>{c.output_grads[0], dbias};
  };
  d.deduce = [](const DeduceContext& ctx) {
    expect_same_placement(ctx);
    const int n = last_dim(ctx);
    const sharding::Annotation& x = ctx.inputs[0];
    expect_annotation(ctx, 1, map_dims(ctx, x, "x", [&](int dim) {
                        HSPMD_CHECK(dim != sharding::kPartial)
                            << ctx.where() << ": x " << x.to_string()
                            << " is partial: each summand would add the bias; insert a Reshard before input 0";
                        return dim == n ? 0 : sharding::kDuplicate;
                      }));
    return std::vector<sharding::Annotation>{x};
  };
  return d;
}

OpDef bias_add_bwd_def() {
  OpDef d{OpKind::kBiasAddBwd, "bias_add_bwd", 1, 1, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) {
    expect_floating(ctx, 0);
    HSPMD_CHECK(!ctx.inputs[0].shape.empty()) << ctx.where() << ": dy must have rank >= 1";
    return std::vector<TensorInfo>{{{ctx.inputs[0].shape.back()}, ctx.inputs[0].dtype}};
  };
  d.deduce = [](const DeduceContext& ctx) {
    const int n = last_dim(ctx);
    return std::vector<sharding::Annotation>{map_dims(ctx, ctx.inputs[0], "dy", [&](int dim) {
      if (dim == n) return 0;
      return dim >= 0 ? sharding::kPartial : dim;  // a split leading dim sums into a partial
    })};
  };
  return d;
}

void add_bias_add_kernels(KernelRegistry& r) {
  r.add(OpKind::kBiasAdd, DeviceType::kCPU, kFloat, [](KernelContext& k) {
    Tensor y = k.new_output(0);
    kernels::bias_add(k.inputs[0], k.inputs[1], y);
    k.outputs = {y};
  });
  r.add(OpKind::kBiasAddBwd, DeviceType::kCPU, kFloat, [](KernelContext& k) {
    Tensor dbias = k.new_output(0);
    std::vector<int> leading(k.inputs[0].rank() - 1);
    for (size_t i = 0; i < leading.size(); ++i) leading[i] = static_cast<int>(i);
    kernels::sum(k.inputs[0], leading, dbias);
    k.outputs = {dbias};
  });
}

}  // namespace detail

TensorRef ops::bias_add(Graph& g, TensorRef x, TensorRef bias, const std::string& name) {
  return g.add_op1(OpKind::kBiasAdd, name, {x, bias});
}

}  // namespace hspmd::graph
