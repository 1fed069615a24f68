// Ops that move no data on one device:
//   reshape(x) -> same elements in attrs.shape (symbolic). Numel equality is checked when building
//                 if both sides simplify to the same expression or are static, else per run.
//   reshard(x) -> x. A named marker where an annotation plan may change the tensor's sharding
//                 (paper §4-§5); specialization later replaces it by communication. Its gradient is
//                 a reshard named "<name>.bwd", which plans annotate too (architecture §9).
// Deduction:
//   reshape: input and output dims are matched in groups of equal element count ([T, 32] ->
//            [T, 4, 8]: {0}->{0}, {1}->{1, 2}). A split of the first dim of a group moves to the
//            first dim of its output group when its degree divides that dim (S1:4 -> S1:4, the
//            heads); a split of any other dim of a group is an error. Partial and duplicate pass.
//   reshard: the plan's annotation for its name; with no plan entry it is the identity. The
//            driver (graph/deduction.h) gives "<name>.bwd" a default target (see there).
#include "hspmd/core/error.h"
#include "hspmd/graph/ops.h"
#include "hspmd/graph/ops/op_defs.h"

namespace hspmd::graph {
namespace detail {

namespace {
// For each input dim, the output dim a split of it becomes, or -1 when it cannot be carried.
std::vector<int> reshape_dim_map(const SymShape& from, const SymShape& to) {
  std::vector<int> out(from.size(), -1);
  size_t i = 0, j = 0;
  while (i < from.size() && j < to.size()) {
    const size_t gi = i, gj = j;
    SymExpr acc_in = from[i++], acc_out = to[j++];
    while (!(acc_in == acc_out)) {
      const bool more_in = i < from.size(), more_out = j < to.size();
      if (!more_in && !more_out) return out;
      bool grow_out;
      if (acc_in.is_constant() && acc_out.is_constant() && more_in && more_out) {
        grow_out = acc_out.constant_value() < acc_in.constant_value();
      } else {
        // Symbolic: grow the side with more dims left (one symbol per group in practice).
        grow_out = more_out && (!more_in || to.size() - j >= from.size() - i);
      }
      if (grow_out) {
        acc_out = acc_out * to[j++];
      } else {
        acc_in = acc_in * from[i++];
      }
    }
    out[gi] = static_cast<int>(gj);
  }
  return out;
}

std::vector<sharding::Annotation> deduce_reshape(const DeduceContext& ctx) {
  const SymShape& from = ctx.infos[0].shape;
  const SymShape& to = ctx.op.attrs.shape;
  const std::vector<int> dim_map = reshape_dim_map(from, to);
  const sharding::Annotation& x = ctx.inputs[0];
  int degree = 1;  // of the entry being mapped (the top tier's hsize for hdim)
  auto map = [&](int dim) {
    if (dim < 0) return dim;
    const int o = dim_map.at(dim);
    HSPMD_CHECK(o >= 0) << ctx.where() << ": input " << x.to_string() << " splits dim " << dim << " of "
                        << to_string(from) << ", which does not lead a group of dims of " << to_string(to)
                        << "; insert a Reshard before the reshape";
    HSPMD_CHECK(!to[o].is_constant() || to[o].constant_value() % degree == 0)
        << ctx.where() << ": input " << x.to_string() << " splits dim " << dim << " in " << degree
        << ", which does not divide dim " << o << " of " << to_string(to) << "; insert a Reshard before the reshape";
    return o;
  };
  std::vector<sharding::DistState> states;
  for (const sharding::DistState& ds : x.ds_union()) {
    std::vector<sharding::DistState::Entry> entries;
    for (const sharding::DistState::Entry& e : ds.entries()) {
      degree = e.degree;
      entries.push_back({map(e.dim), e.degree});
    }
    states.push_back(sharding::DistState::make(std::move(entries)));
  }
  degree = x.hsize();
  const int hdim = x.hsize() > 1 ? map(x.hdim()) : sharding::kDuplicate;
  return {sharding::Annotation::make(x.dg_union(), std::move(states), hdim)};
}
}  // namespace

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
  d.grad = [](GradContext& c) {
    OpAttrs a;
    a.shape = c.graph.info(c.input(0)).shape;
    return std::vector<TensorRef>{c.graph.add_op1(OpKind::kReshape, c.name("bwd"), {c.output_grads[0]}, a)};
  };
  d.deduce = deduce_reshape;
  return d;
}

OpDef reshard_def() {
  OpDef d{OpKind::kReshard, "reshard", 1, 1, nullptr, nullptr, nullptr};
  d.infer = [](const ShapeContext& ctx) { return std::vector<TensorInfo>{ctx.inputs[0]}; };
  d.grad = [](GradContext& c) {
    return std::vector<TensorRef>{c.graph.add_op1(OpKind::kReshard, c.name("bwd"), {c.output_grads[0]})};
  };
  d.deduce = [](const DeduceContext& ctx) {
    if (ctx.planned == nullptr) return std::vector<sharding::Annotation>{ctx.inputs[0]};
    return std::vector<sharding::Annotation>{planned_output(ctx, ctx.infos[0])};
  };
  return d;
}

void add_reshape_kernels(KernelRegistry& r) {
  r.add(OpKind::kReshape, DeviceType::kCPU, kAnyDType, [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    const Shape& to = k.output_shapes[0];
    // run_kernel puts the op's name in front.
    HSPMD_CHECK(x.numel() == to.numel()) << "reshape: input " << x.to_string() << " has " << x.numel()
                                         << " elements, target " << to.to_string() << " has " << to.numel();
    k.outputs = {x.reshape(to.dims())};  // a view: no copy
  });
  // On one device a Reshard is the identity (the distributed runtime runs its own communication).
  r.add(OpKind::kReshard, DeviceType::kCPU, kAnyDType, [](KernelContext& k) { k.outputs = {k.inputs[0]}; });
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
