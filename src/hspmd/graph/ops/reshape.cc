// Ops that move no data on one device:
//   reshape(x) -> same elements in attrs.shape (symbolic). Numel equality is checked when building
//                 if both sides simplify to the same expression or are static, else per run.
//   reshard(x) -> x. A named marker where an annotation plan may change the tensor's sharding
//                 (paper §4-§5); specialization later replaces it by communication. Its gradient is
//                 a reshard named "<name>.bwd", which plans annotate too (DESIGN.md §9).
#include "hspmd/core/error.h"
#include "hspmd/graph/ops.h"
#include "hspmd/graph/ops/op_defs.h"

namespace hspmd::graph {
namespace detail {

OpDef reshape_def() {
  OpDef d{OpKind::kReshape, "reshape", 1, 1, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) {
    const SymShape& from = ctx.inputs[0].shape;
    const SymShape& to = ctx.op.attrs.shape;
    SymExpr n_from = sym_numel(from), n_to = sym_numel(to);
    bool comparable = (n_from.is_constant() && n_to.is_constant()) || n_from == n_to;
    HSPMD_CHECK(!comparable || n_from == n_to) << ctx.where() << ": cannot reshape " << to_string(from) << " ("
                                               << n_from.to_string() << " elements) to " << to_string(to) << " ("
                                               << n_to.to_string() << " elements)";
    return std::vector<TensorInfo>{{to, ctx.inputs[0].dtype}};
  };
  d.run = [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    const Shape& to = k.output_shapes[0];
    HSPMD_CHECK(x.numel() == to.numel()) << "op '" << k.op.name << "' (reshape): input " << x.to_string()
                                         << " has " << x.numel() << " elements, target " << to.to_string()
                                         << " has " << to.numel();
    k.outputs = {x.reshape(to.dims())};  // a view: no copy
  };
  d.grad = [](GradContext& c) {
    OpAttrs a;
    a.shape = c.graph.info(c.input(0)).shape;
    return std::vector<TensorRef>{c.graph.add_op1(OpKind::kReshape, c.name("bwd"), {c.output_grads[0]}, a)};
  };
  return d;
}

OpDef reshard_def() {
  OpDef d{OpKind::kReshard, "reshard", 1, 1, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) { return std::vector<TensorInfo>{ctx.inputs[0]}; };
  d.run = [](KernelContext& k) { k.outputs = {k.inputs[0]}; };
  d.grad = [](GradContext& c) {
    return std::vector<TensorRef>{c.graph.add_op1(OpKind::kReshard, c.name("bwd"), {c.output_grads[0]})};
  };
  return d;
}

}  // namespace detail

TensorRef ops::reshape(Graph& g, TensorRef x, const SymShape& shape, const std::string& name) {
  OpAttrs a;
  a.shape = shape;
  return g.add_op1(OpKind::kReshape, name, {x}, a);
}

TensorRef ops::reshard(Graph& g, TensorRef x, const std::string& name) {
  return g.add_op1(OpKind::kReshard, name, {x});
}

}  // namespace hspmd::graph
