#include "hspmd/graph/autograd.h"

#include <map>
#include <set>

#include "hspmd/core/error.h"
#include "hspmd/graph/op_registry.h"
#include "hspmd/graph/ops.h"

namespace hspmd::graph {

namespace {

// Sums the partial gradients of tensor t (in arrival order, so the result is deterministic).
TensorRef sum_partials(Graph& g, TensorRef t, const std::vector<TensorRef>& partials) {
  if (partials.empty()) return TensorRef{};
  TensorRef acc = partials[0];
  for (size_t k = 1; k < partials.size(); ++k) {
    acc = ops::add(g, acc, partials[k], g.tensor_name(t) + ".grad_acc" + std::to_string(k));
  }
  return acc;
}

}  // namespace

std::vector<TensorRef> build_backward(Graph& g, TensorRef loss, const std::vector<TensorRef>& wrt) {
  const TensorInfo& loss_info = g.info(loss);
  HSPMD_CHECK(loss_info.shape.empty() && is_floating(loss_info.dtype))
      << "build_backward: loss '" << g.tensor_name(loss) << "' must be a floating scalar, got "
      << dtype_name(loss_info.dtype) << to_string(loss_info.shape);
  const int n = loss.op + 1;

  // depends[op]: some output of op is, or is computed from, a tensor in wrt.
  std::set<TensorRef> wrt_set(wrt.begin(), wrt.end());
  std::vector<bool> depends(n, false);
  auto tensor_depends = [&](TensorRef t) { return wrt_set.count(t) > 0 || (t.op < n && depends[t.op]); };
  for (int id = 0; id < n; ++id) {
    for (TensorRef in : g.op(id).inputs) depends[id] = depends[id] || tensor_depends(in);
  }
  // reaches[op]: some output of op is used on the way to the loss.
  std::vector<bool> reaches(n, false);
  reaches[loss.op] = true;
  for (int id = n - 1; id >= 0; --id) {
    if (!reaches[id]) continue;
    for (TensorRef in : g.op(id).inputs) reaches[in.op] = true;
  }

  const int saved_layer = g.layer();
  const bool saved_backward = g.backward();
  g.set_backward(true);
  std::map<TensorRef, std::vector<TensorRef>> partials;
  g.set_layer(g.op(loss.op).layer);
  partials[loss].push_back(ops::full(g, {}, loss_info.dtype, 1.0, g.tensor_name(loss) + ".grad_seed"));

  for (int id = n - 1; id >= 0; --id) {
    if (!reaches[id] || !depends[id]) continue;
    Op op = g.op(id);
    g.set_layer(op.layer);
    GradContext ctx{g, op, id, {}};
    bool any = false;
    for (int i = 0; i < static_cast<int>(op.outputs.size()); ++i) {
      TensorRef out{id, i};
      auto it = partials.find(out);
      ctx.output_grads.push_back(it == partials.end() ? TensorRef{} : sum_partials(g, out, it->second));
      any = any || ctx.output_grads.back().valid();
    }
    if (!any) continue;
    const OpDef& def = g.registry().get(op.kind);
    HSPMD_CHECK(def.grad) << "build_backward: op '" << op.name << "' (" << def.name
                          << ") has no gradient builder, but the loss depends on it";
    HSPMD_CHECK(ctx.output_grads[0].valid())
        << "build_backward: op '" << op.name << "' (" << def.name
        << "): a gradient reaches an auxiliary output; only output 0 is differentiable";
    std::vector<TensorRef> in_grads = def.grad(ctx);
    HSPMD_ASSERT(in_grads.size() == op.inputs.size()) << def.name << " gradient builder returned "
                                                      << in_grads.size() << " gradients";
    for (size_t j = 0; j < op.inputs.size(); ++j) {
      if (in_grads[j].valid() && tensor_depends(op.inputs[j])) partials[op.inputs[j]].push_back(in_grads[j]);
    }
  }

  std::vector<TensorRef> result;
  for (TensorRef w : wrt) {
    g.set_layer(g.op(w.op).layer);
    auto it = partials.find(w);
    result.push_back(it == partials.end() ? TensorRef{} : sum_partials(g, w, it->second));
  }
  g.set_layer(saved_layer);
  g.set_backward(saved_backward);
  return result;
}

}  // namespace hspmd::graph
