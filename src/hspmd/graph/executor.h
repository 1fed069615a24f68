// Single-device executor: runs the ops a set of fetched tensors needs, in topological order, on
// concrete tensors whose shapes are resolved per run from the symbol binding.
//
//   Executor ex(g, {loss, grad_w}, {.recompute = true});
//   TensorMap feeds{{"x", x_tensor}};            // placeholders by name
//   TensorMap params{{"w", w_tensor}};           // parameters by name
//   std::vector<Tensor> out = ex.run(feeds, params);   // out[0] = loss, out[1] = d loss / d w
//   ex.stats().peak_bytes;                       // high-water mark of the allocator in this run
//
// Memory and recomputation follow the step plan (graph/step_plan.h), the same rules every rank of
// the distributed runtime uses: the schedule is the forward ops the fetches need, then the
// backward ones (with recompute, each decoder layer's forward ops replayed just before the first
// backward op that reads one of their values); a value is released right after its last read, so
// intermediates never outlive their use. Each op runs through run_kernel (graph/run_kernel.h): the
// kernel registered for its kind, device type and dtype, its outputs checked against the shape rule.
#pragma once

#include <cstddef>
#include <vector>

#include "hspmd/core/allocator.h"
#include "hspmd/graph/graph.h"
#include "hspmd/graph/kernel_registry.h"

namespace hspmd::graph {

struct ExecutorOptions {
  // Where intermediates are allocated; nullptr = Allocator::process_default(). Its device is where
  // the ops run: feeds and parameters must be there, and `kernels` must hold that device's kernels
  // (a GPU allocator, core/cuda/cuda_tensor_memory.h, with graph/cuda/cuda_kernels.h's registry).
  Allocator* allocator = nullptr;
  // Per-layer activation recomputation (recompute forward in backward).
  bool recompute = false;
  // false keeps every intermediate until the run ends (a reference for memory measurements).
  bool free_intermediates = true;
  // Where the ops' kernels come from; nullptr = KernelRegistry::standard() (the CPU kernels).
  const KernelRegistry* kernels = nullptr;
};

struct ExecutorStats {
  size_t peak_bytes = 0;      // allocator high-water mark during the last run (includes what it held before)
  int ops_run = 0;            // kernel launches in the last run, recomputed ones included
  SymBinding binding;         // the symbols of the last run
};

class Executor {
 public:
  // The graph must outlive the executor (it is referenced, not copied).
  Executor(const Graph& graph, std::vector<TensorRef> fetches, ExecutorOptions options = {});

  // Runs the schedule. Every placeholder and parameter the fetches need must be present (by name).
  // `extra` binds symbols no placeholder determines. Returns one tensor per fetch.
  std::vector<Tensor> run(const TensorMap& feeds, const TensorMap& params, const SymBinding& extra = {});

  const ExecutorStats& stats() const { return stats_; }
  // Op ids in execution order (a recomputed op appears twice).
  const std::vector<int>& schedule() const { return schedule_; }

 private:
  const Graph& graph_;
  std::vector<TensorRef> fetches_;
  ExecutorOptions options_;
  std::vector<int> schedule_;
  // release_after_[s]: values nothing reads after step s (before writing them again, if ever).
  std::vector<std::vector<TensorRef>> release_after_;
  ExecutorStats stats_;
};

}  // namespace hspmd::graph
