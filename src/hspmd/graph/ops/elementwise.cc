// Elementwise ops (inputs of equal shape and dtype):
//   add(a, b)               -> a + b              (residuals; autograd also uses it to sum gradients)
//   swiglu(gate, up)        -> silu(gate) * up    (the Llama MLP activation)
//   swiglu_bwd(gate, up, dy) -> (dgate, dup)
// Deduction (Table 2, elementwise): identical input annotations pass through; add is linear, so
// two partial summands stay partial; swiglu is not, so partial inputs are an error.
#include "hspmd/core/error.h"
#include "hspmd/graph/ops.h"
#include "hspmd/graph/ops/op_defs.h"
#include "hspmd/kernels/elementwise.h"
#include "hspmd/sharding/deduce.h"

namespace hspmd::graph {
namespace detail {

namespace {
// n inputs of one shape and floating dtype; `outputs` outputs like input 0.
std::vector<TensorInfo> same_as_inputs(const ShapeContext& ctx, int outputs) {
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    expect_floating(ctx, static_cast<int>(i));
    expect_same_dtype(ctx, 0, static_cast<int>(i));
    expect_same_shape(ctx, 0, static_cast<int>(i));
  }
  return std::vector<TensorInfo>(outputs, ctx.inputs[0]);
}
std::vector<sharding::Annotation> same_annotation(const DeduceContext& ctx, int outputs, sharding::Linearity lin) {
  return std::vector<sharding::Annotation>(outputs, sharding::deduce_elementwise(op_label(ctx), ctx.inputs, lin));
}
}  // namespace

OpDef add_def() {
  OpDef d{OpKind::kAdd, "add", 2, 1, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) { return same_as_inputs(ctx, 1); };
  d.grad = [](GradContext& c) { return std::vector<TensorRef>{c.output_grads[0], c.output_grads[0]}; };
  d.deduce = [](const DeduceContext& ctx) { return same_annotation(ctx, 1, sharding::Linearity::kLinear); };
  return d;
}

OpDef swiglu_def() {
  OpDef d{OpKind::kSwiglu, "swiglu", 2, 1, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) { return same_as_inputs(ctx, 1); };
  d.grad = [](GradContext& c) {
    return c.graph.add_op(OpKind::kSwigluBwd, c.name("bwd"), {c.input(0), c.input(1), c.output_grads[0]});
  };
  d.deduce = [](const DeduceContext& ctx) { return same_annotation(ctx, 1, sharding::Linearity::kNonLinear); };
  return d;
}

OpDef swiglu_bwd_def() {
  OpDef d{OpKind::kSwigluBwd, "swiglu_bwd", 3, 2, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) { return same_as_inputs(ctx, 2); };
  d.deduce = [](const DeduceContext& ctx) { return same_annotation(ctx, 2, sharding::Linearity::kNonLinear); };
  return d;
}

void add_elementwise_kernels(KernelRegistry& r) {
  r.add(OpKind::kAdd, DeviceType::kCPU, kFloatOrBf16, [](KernelContext& k) {
    Tensor out = k.new_output(0);
    kernels::add(k.inputs[0], k.inputs[1], out);
    k.outputs = {out};
  });
  r.add(OpKind::kSwiglu, DeviceType::kCPU, kFloatOrBf16, [](KernelContext& k) {
    Tensor out = k.new_output(0);
    kernels::swiglu_fwd(k.inputs[0], k.inputs[1], out);
    k.outputs = {out};
  });
  r.add(OpKind::kSwigluBwd, DeviceType::kCPU, kFloatOrBf16, [](KernelContext& k) {
    Tensor dgate = k.new_output(0), dup = k.new_output(1);
    kernels::swiglu_bwd(k.inputs[0], k.inputs[1], k.inputs[2], dgate, dup);
    k.outputs = {dgate, dup};
  });
}

}  // namespace detail

TensorRef ops::add(Graph& g, TensorRef a, TensorRef b, const std::string& name) {
  return g.add_op1(OpKind::kAdd, name, {a, b});
}

TensorRef ops::swiglu(Graph& g, TensorRef gate, TensorRef up, const std::string& name) {
  return g.add_op1(OpKind::kSwiglu, name, {gate, up});
}

}  // namespace hspmd::graph
