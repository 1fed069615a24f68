#include "hspmd/graph/step_plan.h"

#include <map>
#include <set>

namespace hspmd::graph {

namespace {
bool is_leaf(OpKind kind) { return kind == OpKind::kPlaceholder || kind == OpKind::kParameter; }
}  // namespace

StepPlan::StepPlan(const Graph& g, std::vector<int> forward, std::vector<int> backward, StepPlanOptions options)
    : graph_(&g), forward_(std::move(forward)) {
  const int n = g.num_ops();
  replayed_.assign(n, false);
  std::map<int, std::vector<int>> layer_ops;  // layer -> its replayed forward ops, in F order
  if (options.recompute) {
    std::vector<bool> boundary(n, false);  // read by a forward op of another layer
    for (int id = 0; id < n; ++id) {
      const Op& op = g.op(id);
      if (op.backward) continue;
      for (TensorRef in : op.inputs) {
        if (g.op(in.op).layer != op.layer) boundary[in.op] = true;
      }
    }
    for (int id : forward_) {
      const Op& op = g.op(id);
      if (op.layer < 0 || is_leaf(op.kind) || boundary[id]) continue;
      replayed_[id] = true;
      layer_ops[op.layer].push_back(id);
    }
  }
  std::set<int> replayed_layers;
  for (int id : backward) {
    for (TensorRef in : g.op(id).inputs) {
      if (!replayed_[in.op]) continue;
      const int layer = g.op(in.op).layer;
      if (!replayed_layers.insert(layer).second) continue;
      for (int r : layer_ops[layer]) backward_.push_back({r, true});
    }
    backward_.push_back({id, false});
  }
  saved_.resize(n);
  for (int id = 0; id < n; ++id) saved_[id].assign(g.op(id).outputs.size(), false);
  for (const Step& step : backward_) {
    for (TensorRef in : g.op(step.op).inputs) {
      if (!g.op(in.op).backward && !replayed_[in.op]) saved_[in.op][in.index] = true;
    }
  }
}

StepPlan::Releases StepPlan::releases(const std::vector<TensorRef>& keep,
                                      const std::function<bool(TensorRef)>& held) const {
  const std::set<TensorRef> kept(keep.begin(), keep.end());
  std::vector<int> steps(forward_);
  for (const Step& s : backward_) steps.push_back(s.op);
  std::vector<std::vector<TensorRef>> after(steps.size());
  // Backward scan: `live` holds the values a later step reads before they are written again.
  std::set<TensorRef> live;
  for (int s = static_cast<int>(steps.size()) - 1; s >= 0; --s) {
    const Op& op = graph_->op(steps[s]);
    for (int i = 0; i < static_cast<int>(op.outputs.size()); ++i) {
      const TensorRef out{steps[s], i};
      if (!live.count(out) && !kept.count(out)) after[s].push_back(out);  // nothing reads it after this write
      live.erase(out);
    }
    for (TensorRef in : std::set<TensorRef>(op.inputs.begin(), op.inputs.end())) {
      if (held && !held(in)) continue;
      if (!live.count(in) && !kept.count(in)) after[s].push_back(in);
      live.insert(in);
    }
  }
  Releases r;
  r.forward.assign(after.begin(), after.begin() + static_cast<std::ptrdiff_t>(forward_.size()));
  r.backward.assign(after.begin() + static_cast<std::ptrdiff_t>(forward_.size()), after.end());
  return r;
}

}  // namespace hspmd::graph
