#include "hspmd/graph/executor.h"

#include <map>
#include <set>

#include "hspmd/core/error.h"
#include "hspmd/graph/op_registry.h"

namespace hspmd::graph {

namespace {
bool is_leaf(OpKind kind) { return kind == OpKind::kPlaceholder || kind == OpKind::kParameter; }
}  // namespace

Executor::Executor(const Graph& graph, std::vector<TensorRef> fetches, ExecutorOptions options)
    : graph_(graph), fetches_(std::move(fetches)), options_(options) {
  for (TensorRef f : fetches_) graph_.info(f);  // throws on a ref outside the graph
  build_schedule();
  build_liveness();
}

void Executor::build_schedule() {
  const int n = graph_.num_ops();
  std::vector<bool> needed(n, false);
  for (TensorRef f : fetches_) needed[f.op] = true;
  for (int id = n - 1; id >= 0; --id) {
    if (!needed[id]) continue;
    for (TensorRef in : graph_.op(id).inputs) needed[in.op] = true;
  }
  // Forward ops of each layer, replayed before the layer's backward when recomputing.
  std::map<int, std::vector<int>> layer_ops;
  for (int id = 0; id < n; ++id) {
    const Op& op = graph_.op(id);
    if (needed[id] && options_.recompute && !op.backward && op.layer >= 0 && !is_leaf(op.kind)) {
      layer_ops[op.layer].push_back(id);
    }
  }
  // A layer's boundary outputs (read by forward ops outside the layer: the next layer's input)
  // stay alive anyway, so reading them does not trigger a replay; reading an internal one does.
  // This replays layer l during its own backward, not already during layer l+1's.
  std::set<int> boundary_producers;
  for (int id = 0; id < n; ++id) {
    const Op& op = graph_.op(id);
    if (!needed[id] || op.backward) continue;
    for (TensorRef in : op.inputs) {
      if (graph_.op(in.op).layer != op.layer) boundary_producers.insert(in.op);
    }
  }
  std::set<int> recomputed;
  for (int id = 0; id < n; ++id) {
    if (!needed[id]) continue;
    const Op& op = graph_.op(id);
    if (op.backward) {
      for (TensorRef in : op.inputs) {
        const Op& producer = graph_.op(in.op);
        int layer = producer.layer;
        if (producer.backward || is_leaf(producer.kind) || !layer_ops.count(layer) || recomputed.count(layer) ||
            boundary_producers.count(in.op)) {
          continue;
        }
        recomputed.insert(layer);
        schedule_.insert(schedule_.end(), layer_ops[layer].begin(), layer_ops[layer].end());
      }
    }
    schedule_.push_back(id);
  }
}

void Executor::build_liveness() {
  std::set<TensorRef> fetched(fetches_.begin(), fetches_.end());
  release_after_.assign(schedule_.size(), {});
  if (!options_.free_intermediates) return;
  // Backward scan: `live` holds tensors read later by a step before they are written again.
  std::set<TensorRef> live;
  for (int s = static_cast<int>(schedule_.size()) - 1; s >= 0; --s) {
    const Op& op = graph_.op(schedule_[s]);
    for (int i = 0; i < static_cast<int>(op.outputs.size()); ++i) {
      TensorRef out{schedule_[s], i};
      if (!live.count(out) && !fetched.count(out)) release_after_[s].push_back(out);  // never read
      live.erase(out);
    }
    for (TensorRef in : std::set<TensorRef>(op.inputs.begin(), op.inputs.end())) {
      if (!live.count(in) && !fetched.count(in)) release_after_[s].push_back(in);
      live.insert(in);
    }
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
    // Built only when a check fails: the message stream is evaluated lazily.
    auto where = [&op] { return "op '" + op.name + "' (" + std::string(op_kind_name(op.kind)) + ")"; };
    out_shapes.clear();
    for (const TensorInfo& t : op.outputs) out_shapes.push_back(evaluate(t.shape, stats_.binding));

    if (is_leaf(op.kind)) {
      const TensorMap& source = op.kind == OpKind::kPlaceholder ? feeds : params;
      auto it = source.find(op.name);
      HSPMD_CHECK(it != source.end()) << where() << " is needed by this run but was not given";
      const Tensor& t = it->second;
      HSPMD_CHECK(t.defined() && t.dtype() == op.outputs[0].dtype && t.shape() == out_shapes[0])
          << where() << ": expected " << dtype_name(op.outputs[0].dtype) << out_shapes[0].to_string() << ", got "
          << (t.defined() ? t.to_string() : "an undefined tensor");
      values[id] = {t};
    } else {
      std::vector<Tensor> inputs;
      for (TensorRef in : op.inputs) {
        const std::vector<Tensor>& v = values[in.op];
        HSPMD_ASSERT(in.index < static_cast<int>(v.size()) && v[in.index].defined())
            << where() << ": input '" << graph_.tensor_name(in) << "' was released before its last use";
        inputs.push_back(v[in.index]);
      }
      KernelContext ctx{op, inputs, out_shapes, allocator, {}, {}};
      // Kernel errors name the kernel; prefix the op so the user sees which graph node failed.
      try {
        graph_.registry().get(op.kind).run(ctx);
      } catch (const OutOfMemoryError& e) {
        throw OutOfMemoryError(where() + ": " + e.what());
      } catch (const Error& e) {
        throw Error(where() + ": " + e.what());
      }
      HSPMD_ASSERT(ctx.outputs.size() == op.outputs.size()) << where() << ": kernel produced " << ctx.outputs.size()
                                                             << " outputs";
      for (size_t i = 0; i < ctx.outputs.size(); ++i) {
        HSPMD_ASSERT(ctx.outputs[i].shape() == out_shapes[i] && ctx.outputs[i].dtype() == op.outputs[i].dtype)
            << where() << ": output " << i << " is " << ctx.outputs[i].to_string() << ", expected "
            << dtype_name(op.outputs[i].dtype) << out_shapes[i].to_string();
      }
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
