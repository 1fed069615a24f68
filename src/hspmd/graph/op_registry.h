// One registry entry per op kind (architecture §2): everything about a kind in one place.
//
//   const OpDef& def = OpRegistry::standard().get(OpKind::kRmsNorm);
//   def.infer(shape_ctx)  -> output shapes/dtypes from input shapes (symbolic), errors name the op
//   def.grad(grad_ctx)    -> appends kRmsNormBwd to the graph, returns d loss / d inputs
//   def.deduce(ded_ctx)   -> output Annotations from input Annotations (paper §6.1, Table 2):
//                            x "(S0:2)" over [0-1], weight "(D:2)" -> y "(S0:2)", rstd "(S0:2)"
//
// The registry is built explicitly (build_standard_registry), never by static initializers; the
// entries live one op family per file under graph/ops/. The kernels are not here: the same files
// register them by (kind, device type, dtype) in graph/kernel_registry.h, and run_kernel
// (graph/run_kernel.h) runs them.
#pragma once

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "hspmd/core/tensor.h"
#include "hspmd/graph/graph.h"
#include "hspmd/sharding/annotation.h"

namespace hspmd::graph {

struct ShapeContext {
  const Op& op;                           // name and attrs (its outputs are not yet set)
  const std::vector<TensorInfo>& inputs;  // one per op input
  // "op 'model.layers.0.q_proj' (matmul)": the prefix of every shape-rule error.
  std::string where() const;
};

struct GradContext {
  Graph& graph;
  Op op;  // a copy: appending backward ops may move the graph's storage
  int op_id;
  // d loss / d output i; invalid where no gradient flows (e.g. the lse of attention).
  std::vector<TensorRef> output_grads;

  TensorRef input(int i) const { return op.inputs.at(i); }
  TensorRef output(int i) const { return TensorRef{op_id, i}; }
  // Name for a backward op: "<forward name>.<suffix>".
  std::string name(const std::string& suffix) const { return op.name + "." + suffix; }
};

// Input of a deduction rule (graph/deduction.h drives them over a whole graph).
struct DeduceContext {
  const Op& op;
  const std::vector<TensorInfo>& infos;                 // one per op input (shapes, dtypes)
  const std::vector<sharding::Annotation>& inputs;      // one per op input
  // The annotation the plan fixes for this op's output (leaves and Reshards, by name); null when
  // the plan names none.
  const sharding::Annotation* planned = nullptr;
  std::string where() const;  // as ShapeContext::where
};

struct OpDef {
  OpKind kind;
  std::string name;      // op_kind_name(kind)
  int num_inputs = 0;
  int num_outputs = 1;
  std::function<std::vector<TensorInfo>(const ShapeContext&)> infer;
  // d loss / d input i for each input (invalid ref where none flows, e.g. token ids). Empty for
  // kinds that are never differentiated (backward kinds, leaves).
  std::function<std::vector<TensorRef>(GradContext&)> grad;
  // Output annotations, one per output; errors name the op (ctx.where()), the input annotations
  // at fault and the Reshard that would fix them. Every kind has one (backward kinds included).
  std::function<std::vector<sharding::Annotation>(const DeduceContext&)> deduce;
};

class OpRegistry {
 public:
  explicit OpRegistry(std::vector<OpDef> defs);  // one entry per OpKind, in enum order
  const OpDef& get(OpKind kind) const;
  // The registry of every kind in op_kind.h, built on first use.
  static const OpRegistry& standard();

 private:
  std::vector<OpDef> defs_;
};

// Builds the entry list: one switch over OpKind (exhaustive), each case from graph/ops/*.cc.
std::vector<OpDef> build_standard_registry();

}  // namespace hspmd::graph
