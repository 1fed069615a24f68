#include "hspmd/graph/graph.h"

#include <sstream>

#include "hspmd/core/error.h"
#include "hspmd/graph/op_registry.h"

namespace hspmd::graph {

Graph::Graph() : Graph(OpRegistry::standard()) {}
Graph::Graph(const OpRegistry& registry) : registry_(&registry) {}

TensorRef Graph::placeholder(const std::string& name, const SymShape& shape, DType dtype) {
  OpAttrs attrs;
  attrs.shape = shape;
  attrs.dtype = dtype;
  return add_op1(OpKind::kPlaceholder, name, {}, attrs);
}

TensorRef Graph::parameter(const std::string& name, const Shape& shape, DType dtype, InitSpec init) {
  OpAttrs attrs;
  attrs.shape = to_sym_shape(shape);
  attrs.dtype = dtype;
  attrs.init = init;
  return add_op1(OpKind::kParameter, name, {}, attrs);
}

std::vector<TensorRef> Graph::add_op(OpKind kind, const std::string& name, const std::vector<TensorRef>& inputs,
                                     const OpAttrs& attrs) {
  const OpDef& def = registry_->get(kind);
  Op op;
  op.kind = kind;
  op.name = name;
  op.inputs = inputs;
  op.attrs = attrs;
  op.layer = layer_;
  op.backward = backward_;
  std::string where = "op '" + name + "' (" + def.name + ")";
  HSPMD_CHECK(!name.empty()) << "an op of kind " << def.name << " needs a name";
  HSPMD_CHECK(static_cast<int>(inputs.size()) == def.num_inputs)
      << where << ": takes " << def.num_inputs << " inputs, got " << inputs.size();
  std::vector<TensorInfo> in_infos;
  for (size_t i = 0; i < inputs.size(); ++i) {
    HSPMD_CHECK(inputs[i].valid() && inputs[i].op < num_ops() &&
                inputs[i].index < static_cast<int>(ops_[inputs[i].op].outputs.size()))
        << where << ": input " << i << " is not a tensor of this graph";
    in_infos.push_back(info(inputs[i]));
  }
  bool named = kind == OpKind::kPlaceholder || kind == OpKind::kParameter || kind == OpKind::kReshard;
  if (named) {
    HSPMD_CHECK(!named_.count(name)) << where << ": the name is already used by op '"
                                     << ops_[named_.at(name)].name << "' ("
                                     << op_kind_name(ops_[named_.at(name)].kind) << ")";
  }
  op.outputs = def.infer(ShapeContext{op, in_infos});
  HSPMD_ASSERT(static_cast<int>(op.outputs.size()) == def.num_outputs) << where << ": shape rule output count";
  int id = num_ops();
  for (const TensorInfo& out : op.outputs) {
    for (const SymExpr& d : out.shape) {
      if (!d.divisibility_requirements().empty()) constraints_.push_back({d, id});
    }
  }
  if (named) named_[name] = id;
  ops_.push_back(std::move(op));
  std::vector<TensorRef> refs;
  for (int i = 0; i < def.num_outputs; ++i) refs.push_back(TensorRef{id, i});
  return refs;
}

TensorRef Graph::add_op1(OpKind kind, const std::string& name, const std::vector<TensorRef>& inputs,
                         const OpAttrs& attrs) {
  return add_op(kind, name, inputs, attrs).at(0);
}

const Op& Graph::op(int id) const {
  HSPMD_CHECK(id >= 0 && id < num_ops()) << "op id " << id << " out of range (graph has " << num_ops() << " ops)";
  return ops_[id];
}

const TensorInfo& Graph::info(TensorRef t) const {
  const Op& o = op(t.op);
  HSPMD_CHECK(t.index >= 0 && t.index < static_cast<int>(o.outputs.size()))
      << "op '" << o.name << "' has no output " << t.index;
  return o.outputs[t.index];
}

std::string Graph::tensor_name(TensorRef t) const {
  const Op& o = op(t.op);
  return o.outputs.size() == 1 ? o.name : o.name + ":" + std::to_string(t.index);
}

std::optional<TensorRef> Graph::find(const std::string& name) const {
  auto it = named_.find(name);
  if (it == named_.end()) return std::nullopt;
  return TensorRef{it->second, 0};
}

std::vector<TensorRef> Graph::placeholders() const {
  std::vector<TensorRef> out;
  for (int i = 0; i < num_ops(); ++i) {
    if (ops_[i].kind == OpKind::kPlaceholder) out.push_back({i, 0});
  }
  return out;
}

std::vector<TensorRef> Graph::parameters() const {
  std::vector<TensorRef> out;
  for (int i = 0; i < num_ops(); ++i) {
    if (ops_[i].kind == OpKind::kParameter) out.push_back({i, 0});
  }
  return out;
}

SymBinding Graph::bind(const TensorMap& feeds, const SymBinding& extra) const {
  SymBinding binding = extra;
  std::vector<std::pair<TensorRef, Shape>> fed;
  for (TensorRef p : placeholders()) {
    const Op& o = ops_[p.op];
    auto it = feeds.find(o.name);
    if (it == feeds.end()) continue;
    const Tensor& t = it->second;
    const TensorInfo& declared = o.outputs[0];
    HSPMD_CHECK(t.defined()) << "placeholder '" << o.name << "': fed an undefined tensor";
    HSPMD_CHECK(t.dtype() == declared.dtype) << "placeholder '" << o.name << "' is "
                                             << dtype_name(declared.dtype) << ", fed " << t.to_string();
    HSPMD_CHECK(t.rank() == static_cast<int>(declared.shape.size()))
        << "placeholder '" << o.name << "' has shape " << hspmd::to_string(declared.shape) << ", fed " << t.to_string();
    fed.emplace_back(p, t.shape());
  }
  // First solve dims that determine a symbol (T, N + 1), then check every dim against its size.
  for (const auto& [p, shape] : fed) {
    const SymShape& declared = ops_[p.op].outputs[0].shape;
    for (size_t d = 0; d < declared.size(); ++d) declared[d].solve_into(shape.dim(static_cast<int>(d)), binding);
  }
  for (const auto& [p, shape] : fed) {
    const SymShape& declared = ops_[p.op].outputs[0].shape;
    for (size_t d = 0; d < declared.size(); ++d) {
      int64_t expected = declared[d].evaluate(binding);
      HSPMD_CHECK(expected == shape.dim(static_cast<int>(d)))
          << "placeholder '" << ops_[p.op].name << "' dim " << d << " is " << declared[d].to_string() << " = "
          << expected << ", fed size " << shape.dim(static_cast<int>(d));
    }
  }
  check_constraints(binding);
  return binding;
}

void Graph::check_constraints(const SymBinding& binding) const {
  for (const Constraint& c : constraints_) {
    const Op& o = ops_[c.op];
    check_divisibility(c.expr, binding, "op '" + o.name + "' (" + std::string(op_kind_name(o.kind)) + ")");
  }
}

std::string Graph::to_string() const {
  std::ostringstream out;
  for (int i = 0; i < num_ops(); ++i) {
    const Op& o = ops_[i];
    out << "%" << i << " = " << op_kind_name(o.kind) << "(";
    for (size_t j = 0; j < o.inputs.size(); ++j) {
      out << (j ? ", " : "") << "%" << o.inputs[j].op;
      if (ops_[o.inputs[j].op].outputs.size() > 1) out << ":" << o.inputs[j].index;
    }
    out << ")";
    for (const TensorInfo& t : o.outputs) out << " " << hspmd::to_string(t.shape) << " " << dtype_name(t.dtype);
    out << "  '" << o.name << "'";
    if (o.layer >= 0) out << " L" << o.layer;
    if (o.backward) out << " bwd";
    out << "\n";
  }
  return out.str();
}

TensorMap init_parameters(const Graph& g, uint64_t seed, Allocator* allocator) {
  TensorMap out;
  for (TensorRef p : g.parameters()) {
    const Op& o = g.op(p.op);
    out[o.name] = init_tensor(o.name, evaluate(o.outputs[0].shape, {}), o.outputs[0].dtype, o.attrs.init, seed, 0,
                              allocator);
  }
  return out;
}

}  // namespace hspmd::graph
