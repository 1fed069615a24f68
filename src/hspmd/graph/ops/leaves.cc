// Leaves and constants.
//   placeholder: attrs.shape, attrs.dtype; fed by name per run (Executor feeds).
//   parameter:   attrs.shape (static), attrs.dtype, attrs.init; values come from a TensorMap by name.
//   full:        attrs.shape, attrs.dtype, attrs.value: every element = value.
#include "hspmd/core/error.h"
#include "hspmd/graph/ops.h"
#include "hspmd/graph/ops/op_defs.h"

namespace hspmd::graph {
namespace detail {

namespace {
std::vector<TensorInfo> declared(const ShapeContext& ctx) { return {TensorInfo{ctx.op.attrs.shape, ctx.op.attrs.dtype}}; }
// Leaves take the plan's annotation (paper §3: the plan fixes leaves and Reshards). An unnamed
// constant (the gradient seed) is given one by the driver (graph/deduction.h).
std::vector<sharding::Annotation> planned(const DeduceContext& ctx) {
  return {planned_output(ctx, TensorInfo{ctx.op.attrs.shape, ctx.op.attrs.dtype})};
}
}  // namespace

OpDef placeholder_def() {
  OpDef d{OpKind::kPlaceholder, "placeholder", 0, 1, declared, nullptr, nullptr};
  d.deduce = planned;
  return d;
}

OpDef parameter_def() {
  OpDef d{OpKind::kParameter, "parameter", 0, 1, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) {
    HSPMD_CHECK(is_static(ctx.op.attrs.shape)) << ctx.where() << ": parameters need a static shape, got "
                                               << to_string(ctx.op.attrs.shape);
    HSPMD_CHECK(is_floating(ctx.op.attrs.dtype)) << ctx.where() << ": parameters must be floating point";
    return declared(ctx);
  };
  d.deduce = planned;
  return d;
}

OpDef full_def() {
  OpDef d{OpKind::kFull, "full", 0, 1, declared, nullptr, nullptr};
  d.deduce = planned;
  return d;
}

void add_leaf_kernels(KernelRegistry& r) {
  r.add(OpKind::kFull, DeviceType::kCPU, kAnyDType, [](KernelContext& k) {
    Tensor out = k.new_output(0);
    out.fill(k.op.attrs.value);
    k.outputs = {out};
  });
}

}  // namespace detail

TensorRef ops::full(Graph& g, const SymShape& shape, DType dtype, double value, const std::string& name) {
  OpAttrs a;
  a.shape = shape;
  a.dtype = dtype;
  a.value = value;
  return g.add_op1(OpKind::kFull, name, {}, a);
}

}  // namespace hspmd::graph
