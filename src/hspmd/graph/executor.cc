#include "hspmd/graph/executor.h"

#include "hspmd/core/error.h"
#include "hspmd/graph/run_kernel.h"
#include "hspmd/graph/step_plan.h"

namespace hspmd::graph {

namespace {
bool is_leaf(OpKind kind) { return kind == OpKind::kPlaceholder || kind == OpKind::kParameter; }
}  // namespace

Executor::Executor(const Graph& graph, std::vector<TensorRef> fetches, ExecutorOptions options)
    : graph_(graph), fetches_(std::move(fetches)), options_(options) {
  for (TensorRef f : fetches_) graph_.info(f);  // throws on a ref outside the graph
  const int n = graph_.num_ops();
  std::vector<bool> needed(n, false);
  for (TensorRef f : fetches_) needed[f.op] = true;
  for (int id = n - 1; id >= 0; --id) {
    if (!needed[id]) continue;
    for (TensorRef in : graph_.op(id).inputs) needed[in.op] = true;
  }
  // B: the backward ops and anything reading their values; F: the rest (leaves included, bound
  // as steps). Both in graph order, so F then B is a topological order.
  std::vector<int> forward, backward;
  std::vector<bool> in_backward(n, false);
  for (int id = 0; id < n; ++id) {
    if (!needed[id]) continue;
    const Op& op = graph_.op(id);
    in_backward[id] = op.backward;
    for (TensorRef in : op.inputs) in_backward[id] = in_backward[id] || in_backward[in.op];
    (in_backward[id] ? backward : forward).push_back(id);
  }
  const StepPlan plan(graph_, std::move(forward), std::move(backward), {.recompute = options_.recompute});
  schedule_ = plan.forward();
  for (const StepPlan::Step& step : plan.backward()) schedule_.push_back(step.op);
  release_after_.assign(schedule_.size(), {});
  if (options_.free_intermediates) {
    StepPlan::Releases releases = plan.releases(fetches_);
    std::move(releases.forward.begin(), releases.forward.end(), release_after_.begin());
    std::move(releases.backward.begin(), releases.backward.end(),
              release_after_.begin() + static_cast<std::ptrdiff_t>(plan.forward().size()));
  }
}

std::vector<Tensor> Executor::run(const TensorMap& feeds, const TensorMap& params, const SymBinding& extra) {
  Allocator* allocator = options_.allocator ? options_.allocator : &Allocator::process_default();
  stats_ = ExecutorStats{};
  stats_.binding = graph_.bind(feeds, extra);
  allocator->reset_peak();

  std::vector<std::vector<Tensor>> values(graph_.num_ops());
  std::vector<Shape> out_shapes;
  for (size_t s = 0; s < schedule_.size(); ++s) {
    const int id = schedule_[s];
    const Op& op = graph_.op(id);
    out_shapes.clear();
    for (const TensorInfo& t : op.outputs) out_shapes.push_back(evaluate(t.shape, stats_.binding));

    if (is_leaf(op.kind)) {
      const TensorMap& source = op.kind == OpKind::kPlaceholder ? feeds : params;
      auto it = source.find(op.name);
      HSPMD_CHECK(it != source.end()) << op_label(op) << " is needed by this run but was not given";
      const Tensor& t = it->second;
      HSPMD_CHECK(t.defined() && t.dtype() == op.outputs[0].dtype && t.shape() == out_shapes[0])
          << op_label(op) << ": expected " << dtype_name(op.outputs[0].dtype) << out_shapes[0].to_string()
          << ", got " << (t.defined() ? t.to_string() : "an undefined tensor");
      HSPMD_CHECK(t.device() == allocator->device())
          << op_label(op) << " is on " << t.device().to_string() << ", but this run's ops run on "
          << allocator->device().to_string() << " (copy it there: Tensor::clone(allocator))";
      values[id] = {t};
    } else {
      std::vector<Tensor> inputs;
      for (TensorRef in : op.inputs) {
        const std::vector<Tensor>& v = values[in.op];
        HSPMD_ASSERT(in.index < static_cast<int>(v.size()) && v[in.index].defined())
            << op_label(op) << ": input '" << graph_.tensor_name(in) << "' was released before its last use";
        inputs.push_back(v[in.index]);
      }
      KernelContext ctx{op, inputs, out_shapes, allocator, {}, {}};
      run_kernel(ctx, {.kernels = options_.kernels, .device = allocator->device().type});
      values[id] = std::move(ctx.outputs);
      ++stats_.ops_run;
    }
    for (TensorRef t : release_after_[s]) values[t.op][t.index] = Tensor();
  }

  std::vector<Tensor> out;
  for (TensorRef f : fetches_) out.push_back(values[f.op][f.index]);
  stats_.peak_bytes = allocator->peak_bytes();
  return out;
}

}  // namespace hspmd::graph
