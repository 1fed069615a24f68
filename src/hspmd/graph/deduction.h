// Annotation deduction over a whole defined graph (paper §3, §6.1): the plan fixes the
// annotations of leaves (placeholders, parameters) and named Reshards; every other tensor —
// forward and backward — is deduced by its op kind's rule (OpDef::deduce), in op order.
//
//   AnnotationPlan plan;                           // x [T, 16] split on tokens over 2 groups,
//   plan.set("x", Annotation::parse("split0{[0]();[1]()}"));  // w [32, 16] replicated (DP 2)
//   plan.set("w", Annotation::parse("dup{[0]();[1]()}"));
//   DeducedAnnotations d = deduce_annotations(g, plan);
//   d.at(y)  ==  "split0{[0]();[1]()}"             // y = x w^T, tokens still split
//   gradient_syncs(g, d, plan, {w}, {dw})[0].deduced == "partial{[0]();[1]()}"   // to be reduced
//
// Defaults where the plan is silent:
//   - a Reshard without a plan entry is the identity;
//   - a backward Reshard "<name>.bwd" without one reshards the gradient towards the ADJOINT of the
//     forward Reshard's input annotation: the same layout with Partial replaced by Duplicate
//     (the gradient of a partial sum is the full gradient on every summand; architecture §9). So the
//     backward of "attn_in" (D -> D in the forward) all-reduces the partial input gradient;
//   - a constant (kFull, e.g. the gradient seed of the loss) without one is duplicated over the
//     device groups of the first op that consumes it.
// Errors come from the op rules and name the op, the annotations involved and the Reshard to add.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "hspmd/graph/graph.h"
#include "hspmd/sharding/annotation.h"
#include "hspmd/sharding/plan.h"

namespace hspmd::graph {

class DeducedAnnotations {
 public:
  explicit DeducedAnnotations(std::vector<std::vector<sharding::Annotation>> by_op) : by_op_(std::move(by_op)) {}
  // Throws Error naming the tensor when it has no annotation (an op after a failure, or a bad ref).
  const sharding::Annotation& at(TensorRef t) const;
  const std::vector<std::vector<sharding::Annotation>>& by_op() const { return by_op_; }

 private:
  std::vector<std::vector<sharding::Annotation>> by_op_;  // [op id][output index]
};

// Whether ops of one structure share one deduction (graph/deduction_memo.h); the result is the
// same either way, kEveryOp is there to check that.
enum class DeductionReuse { kByStructure, kEveryOp };

// `named`: annotations by name for placeholders, parameters, Reshards (and named constants).
DeducedAnnotations deduce_annotations(const Graph& g, const std::map<std::string, sharding::Annotation>& named,
                                      DeductionReuse reuse = DeductionReuse::kByStructure);
DeducedAnnotations deduce_annotations(const Graph& g, const sharding::AnnotationPlan& plan,
                                      DeductionReuse reuse = DeductionReuse::kByStructure);

// A parameter's gradient as deduced, against the annotation the optimizer needs it in.
struct GradientSync {
  std::string param;
  sharding::Annotation param_annotation;  // from the plan
  sharding::Annotation deduced;           // of d loss / d param, as the backward ops leave it
  // The optimizer state's annotation (the parameter's own when no ZeRO state is planned), zero
  // flags cleared: the gradient reshard goes deduced -> target (architecture §9: a Partial gradient is
  // reduced there; a Duplicate one is never summed).
  sharding::Annotation target;
  bool needs_reshard() const { return deduced != target; }
};

// One entry per (params[i], grads[i]) pair; invalid grads (no gradient flows) are skipped.
std::vector<GradientSync> gradient_syncs(const Graph& g, const DeducedAnnotations& deduced,
                                         const sharding::AnnotationPlan& plan, const std::vector<TensorRef>& params,
                                         const std::vector<TensorRef>& grads);

// The annotation a gradient of a tensor annotated `a` takes: Partial -> Duplicate in both tiers.
sharding::Annotation adjoint_annotation(const sharding::Annotation& a);

}  // namespace hspmd::graph
