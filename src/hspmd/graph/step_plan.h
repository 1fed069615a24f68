// StepPlan: the order one training step runs its ops in, the recomputation rule and liveness, as a
// value. The single-device Executor (graph/executor.h) and every rank of the distributed runtime
// (specialize/exec_graph.h) build theirs from the ops they run, so both recompute and free
// values by the same rule.
//
//   StepPlan plan(g, forward_ops, backward_ops, {.recompute = true});
//   plan.forward()            // F: forward_ops as given
//   plan.backward()           // B: backward_ops, each layer's replayed forward ops (replay = true)
//                             //    inserted just before the first backward op that reads one of them
//   plan.releases(keep)       // after each step of F, then of B: the values nothing later reads
//
// Recompute: a forward op is replayed when it belongs to a layer (Op::layer >= 0), is not a leaf,
// and no forward op of another layer reads its outputs. Those read across a layer boundary (the
// layer's output, the next layer's input) are kept from F anyway, and replaying a Reshard that
// hands them to another stage would send them twice. So F keeps only the boundary values (and
// what B reads outside the layers); the rest of a layer is computed again in B. Kernels are
// deterministic: recomputed values, and the gradients, are bit-identical to the stored ones.
//
// Worked example (tests/graph/step_plan_test.cc): layer 0 computes x1 = reshard(res), res = x + act,
// act = swiglu(a, b), a = x w1^T, b = x w2^T; outside it, loss = CE(x1). x1 is the layer's boundary.
//   F                  a b act res x1 loss
//   B                  seed loss.bwd x1.bwd act.bwd b.grad_a b.grad_b a.grad_a a.grad_b
//   B, recompute       seed loss.bwd x1.bwd a* b* act* res* act.bwd b.grad_a ...     (* replay)
//   F frees            after res: act; after x1: res; with recompute also after act: a, b (B
//                      reads them: kept from F, or replayed before act.bwd)

// Liveness is one backward scan over F then B: a value is freed right after the last step that
// reads it before it is written again (a replay writes it again), or right after its writer when
// nothing reads it; values in `keep` never.
#pragma once

#include <functional>
#include <vector>

#include "hspmd/graph/graph.h"

namespace hspmd::graph {

struct StepPlanOptions {
  // Per-layer activation recomputation: B replays a layer's forward ops before its backward.
  bool recompute = false;
};

class StepPlan {
 public:
  struct Step {
    int op = 0;
    bool replay = false;  // a forward op run again in B (recompute)
  };
  // Per step, what may be freed after it runs.
  struct Releases {
    std::vector<std::vector<TensorRef>> forward;   // one per forward() step
    std::vector<std::vector<TensorRef>> backward;  // one per backward() step
  };

  // forward: the forward ops in run order (leaves may be among them: the executor binds them as
  // steps); backward: the backward ops in run order. The graph must outlive the plan.
  StepPlan(const Graph& g, std::vector<int> forward, std::vector<int> backward, StepPlanOptions options = {});

  const std::vector<int>& forward() const { return forward_; }
  const std::vector<Step>& backward() const { return backward_; }
  bool replayed(int op) const { return replayed_.at(op); }
  // Forward values B reads and does not recompute: kept from F until B.
  bool saved_for_backward(TensorRef t) const { return saved_.at(t.op).at(t.index); }

  // Every output of a step is a value of this run; an input counts only where `held` says the run
  // holds it (a rank receiving a Reshard does not hold its input; null: every input is held).
  Releases releases(const std::vector<TensorRef>& keep, const std::function<bool(TensorRef)>& held = {}) const;

 private:
  const Graph* graph_;
  std::vector<int> forward_;
  std::vector<Step> backward_;
  std::vector<bool> replayed_;            // by op id
  std::vector<std::vector<bool>> saved_;  // [op][output]
};

}  // namespace hspmd::graph
