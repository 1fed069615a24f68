#include "hspmd/graph/deduction.h"

#include "hspmd/core/error.h"
#include "hspmd/graph/deduction_memo.h"
#include "hspmd/graph/op_registry.h"

namespace hspmd::graph {

using sharding::Annotation;
using sharding::DistState;

const Annotation& DeducedAnnotations::at(TensorRef t) const {
  HSPMD_CHECK(t.op >= 0 && t.op < static_cast<int>(by_op_.size()) && t.index >= 0 &&
              t.index < static_cast<int>(by_op_[t.op].size()) && !by_op_[t.op][t.index].is_null())
      << "no deduced annotation for tensor %" << t.op << ":" << t.index;
  return by_op_[t.op][t.index];
}

Annotation adjoint_annotation(const Annotation& a) {
  std::vector<DistState> states;
  for (const DistState& ds : a.ds_union()) {
    std::vector<DistState::Entry> entries;
    for (DistState::Entry e : ds.entries()) {
      if (e.dim == sharding::kPartial) e.dim = sharding::kDuplicate;
      // Adjacent duplicate entries merge without changing any device's coordinates.
      if (!entries.empty() && entries.back().dim == e.dim) {
        entries.back().degree *= e.degree;
      } else {
        entries.push_back(e);
      }
    }
    try {
      states.push_back(DistState::make(std::move(entries)));
    } catch (const Error&) {
      HSPMD_THROW() << "the gradient of " << a.to_string()
                    << " cannot be annotated: replacing partial by duplicate names the duplicate dim twice";
    }
  }
  const int hdim = a.hdim() == sharding::kPartial ? sharding::kDuplicate : a.hdim();
  return Annotation::make(a.dg_union(), std::move(states), hdim);
}

namespace {

bool has_plan_entry(OpKind kind) {
  return kind == OpKind::kPlaceholder || kind == OpKind::kParameter || kind == OpKind::kReshard ||
         kind == OpKind::kFull;
}

// Duplicated everywhere over the device groups of `like`.
Annotation duplicated_over(const Annotation& like) {
  std::vector<DistState> states;
  for (const sharding::DeviceGroup& dg : like.dg_union()) states.push_back(DistState::dup(dg.size()));
  return Annotation::make(like.dg_union(), std::move(states), sharding::kDuplicate);
}

}  // namespace

DeducedAnnotations deduce_annotations(const Graph& g, const std::map<std::string, Annotation>& named,
                                      DeductionReuse reuse) {
  std::vector<std::vector<Annotation>> by_op(g.num_ops());
  DeductionMemo memo;
  for (int id = 0; id < g.num_ops(); ++id) {
    const Op& op = g.op(id);
    const OpDef& def = g.registry().get(op.kind);
    by_op[id].resize(op.outputs.size());
    if (op.kind == OpKind::kFull && !named.count(op.name)) continue;  // given by its first consumer

    std::vector<TensorInfo> infos;
    std::vector<Annotation> inputs;
    for (TensorRef in : op.inputs) {
      infos.push_back(g.info(in));
      inputs.push_back(by_op[in.op][in.index]);
    }
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      if (!inputs[i].is_null()) continue;
      // Only unplanned constants are still unannotated here (every other op precedes its users).
      const Annotation* like = nullptr;
      for (const Annotation& a : inputs) like = (like == nullptr && !a.is_null()) ? &a : like;
      HSPMD_CHECK(like != nullptr) << "op '" << op.name << "' (" << def.name
                                   << "): every input is an unannotated constant; name one in the plan";
      TensorRef in = op.inputs[i];
      by_op[in.op][in.index] = duplicated_over(*like);
      inputs[i] = by_op[in.op][in.index];
    }

    const Annotation* planned = nullptr;
    Annotation default_target;
    if (has_plan_entry(op.kind)) {
      auto it = named.find(op.name);
      if (it != named.end()) {
        planned = &it->second;
      } else if (op.kind == OpKind::kReshard && op.backward && op.name.size() > 4 &&
                 op.name.ends_with(".bwd")) {
        // The backward of Reshard X: towards the adjoint of X's input annotation.
        std::optional<TensorRef> fwd = g.find(op.name.substr(0, op.name.size() - 4));
        if (fwd && g.op(fwd->op).kind == OpKind::kReshard) {
          TensorRef fwd_in = g.op(fwd->op).inputs.at(0);
          default_target = adjoint_annotation(by_op[fwd_in.op][fwd_in.index]);
          planned = &default_target;
        }
      }
    }
    if (reuse == DeductionReuse::kByStructure) {
      if (const std::vector<Annotation>* kept = memo.find(op, infos, inputs, planned)) {
        by_op[id] = *kept;
        continue;
      }
    }
    DeduceContext ctx{op, infos, inputs, planned};
    std::vector<Annotation> outs = def.deduce(ctx);
    HSPMD_ASSERT(outs.size() == op.outputs.size())
        << ctx.where() << ": deduction rule gave " << outs.size() << " annotations for " << op.outputs.size()
        << " outputs";
    for (size_t k = 0; k < outs.size(); ++k) {
      if (is_static(op.outputs[k].shape)) {
        outs[k].validate_for(evaluate(op.outputs[k].shape, {}), g.tensor_name(TensorRef{id, static_cast<int>(k)}));
      }
    }
    if (reuse == DeductionReuse::kByStructure) memo.insert(op, infos, inputs, planned, outs);
    by_op[id] = std::move(outs);
  }
  return DeducedAnnotations(std::move(by_op));
}

DeducedAnnotations deduce_annotations(const Graph& g, const sharding::AnnotationPlan& plan, DeductionReuse reuse) {
  return deduce_annotations(g, plan.tensors(), reuse);
}

std::vector<GradientSync> gradient_syncs(const Graph& g, const DeducedAnnotations& deduced,
                                         const sharding::AnnotationPlan& plan, const std::vector<TensorRef>& params,
                                         const std::vector<TensorRef>& grads) {
  HSPMD_CHECK(params.size() == grads.size())
      << "gradient_syncs: " << params.size() << " parameters but " << grads.size() << " gradients";
  std::vector<GradientSync> out;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!grads[i].valid()) continue;
    const std::string& name = g.op(params[i].op).name;
    GradientSync s;
    s.param = name;
    s.param_annotation = plan.at(name);
    s.deduced = deduced.at(grads[i]);
    std::vector<DistState> cleared;
    for (const DistState& ds : plan.optimizer_state(name).ds_union()) cleared.push_back(ds.with_zero(false));
    s.target = plan.optimizer_state(name).with_ds_union(std::move(cleared));
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace hspmd::graph
