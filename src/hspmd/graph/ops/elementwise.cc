// Elementwise ops (inputs of equal shape and dtype):
//   add(a, b)               -> a + b              (residuals; autograd also uses it to sum gradients)
//   swiglu(gate, up)        -> silu(gate) * up    (the Llama MLP activation)
//   swiglu_bwd(gate, up, dy) -> (dgate, dup)
//   geglu_tanh(gate, up)    -> gelu_tanh(gate) * up   (Gemma's MLP activation, kernels/elementwise.h)
//   geglu_tanh_bwd(gate, up, dy) -> (dgate, dup)
//   scale(x)                -> attrs.scale * x   (Gemma's embedding scale; its gradient is a scale too)
// Deduction (Table 2, elementwise): identical input annotations pass through; add and scale are
// linear, so partial inputs stay partial; swiglu and geglu_tanh are not, so partial inputs are an
// error (under tensor parallelism gate and up are split alike on F, and so is their product).
#include <cmath>

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

OpDef geglu_tanh_def() {
  OpDef d{OpKind::kGegluTanh, "geglu_tanh", 2, 1, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) { return same_as_inputs(ctx, 1); };
  d.grad = [](GradContext& c) {
    return c.graph.add_op(OpKind::kGegluTanhBwd, c.name("bwd"), {c.input(0), c.input(1), c.output_grads[0]});
  };
  d.deduce = [](const DeduceContext& ctx) { return same_annotation(ctx, 1, sharding::Linearity::kNonLinear); };
  return d;
}

OpDef geglu_tanh_bwd_def() {
  OpDef d{OpKind::kGegluTanhBwd, "geglu_tanh_bwd", 3, 2, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) { return same_as_inputs(ctx, 2); };
  d.deduce = [](const DeduceContext& ctx) { return same_annotation(ctx, 2, sharding::Linearity::kNonLinear); };
  return d;
}

OpDef scale_def() {
  OpDef d{OpKind::kScale, "scale", 1, 1, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) {
    HSPMD_CHECK(std::isfinite(ctx.op.attrs.scale))
        << ctx.where() << ": the factor " << ctx.op.attrs.scale << " must be finite";
    return same_as_inputs(ctx, 1);
  };
  d.grad = [](GradContext& c) {
    OpAttrs a;
    a.scale = c.op.attrs.scale;
    return c.graph.add_op(OpKind::kScale, c.name("bwd"), {c.output_grads[0]}, a);
  };
  d.deduce = [](const DeduceContext& ctx) { return same_annotation(ctx, 1, sharding::Linearity::kLinear); };
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
  r.add(OpKind::kGegluTanh, DeviceType::kCPU, kFloatOrBf16, [](KernelContext& k) {
    Tensor out = k.new_output(0);
    kernels::geglu_tanh_fwd(k.inputs[0], k.inputs[1], out);
    k.outputs = {out};
  });
  r.add(OpKind::kGegluTanhBwd, DeviceType::kCPU, kFloatOrBf16, [](KernelContext& k) {
    Tensor dgate = k.new_output(0), dup = k.new_output(1);
    kernels::geglu_tanh_bwd(k.inputs[0], k.inputs[1], k.inputs[2], dgate, dup);
    k.outputs = {dgate, dup};
  });
  r.add(OpKind::kScale, DeviceType::kCPU, kFloatOrBf16, [](KernelContext& k) {
    Tensor out = k.new_output(0);
    kernels::scale(k.inputs[0], k.op.attrs.scale, out);
    k.outputs = {out};
  });
}

}  // namespace detail

TensorRef ops::add(Graph& g, TensorRef a, TensorRef b, const std::string& name) {
  return g.add_op1(OpKind::kAdd, name, {a, b});
}

TensorRef ops::swiglu(Graph& g, TensorRef gate, TensorRef up, const std::string& name) {
  return g.add_op1(OpKind::kSwiglu, name, {gate, up});
}

TensorRef ops::geglu_tanh(Graph& g, TensorRef gate, TensorRef up, const std::string& name) {
  return g.add_op1(OpKind::kGegluTanh, name, {gate, up});
}

TensorRef ops::scale(Graph& g, TensorRef x, double factor, const std::string& name) {
  OpAttrs a;
  a.scale = factor;
  return g.add_op1(OpKind::kScale, name, {x}, a);
}

}  // namespace hspmd::graph
