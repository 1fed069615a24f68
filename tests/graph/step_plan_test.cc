// The step plan of one small layer, with and without recompute: which ops F and B run (replays
// included), what B keeps from F, and the values freed after each step.
#include "hspmd/graph/step_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

#include "hspmd/graph/autograd.h"
#include "hspmd/graph/init.h"
#include "hspmd/graph/ops.h"
#include "hspmd/graph/verifier.h"

namespace hspmd::graph {
namespace {

// Layer 0: x1 = reshard(x + swiglu(x w1^T, x w2^T)); outside it: loss = CE(x1) (the header's example).
struct OneLayer {
  Graph g;
  TensorRef loss;
  std::vector<TensorRef> grads;
  std::vector<int> forward, backward;  // non-leaf ops, in graph order
  OneLayer() {
    TensorRef x = g.placeholder("x", {4, 8}, DType::kFloat32);
    TensorRef targets = g.placeholder("targets", {4}, DType::kInt64);
    TensorRef scale = g.placeholder("scale", {}, DType::kFloat32);
    g.set_layer(0);
    TensorRef w1 = g.parameter("w1", Shape{8, 8}, DType::kFloat32, InitSpec::normal(0.2));
    TensorRef w2 = g.parameter("w2", Shape{8, 8}, DType::kFloat32, InitSpec::normal(0.2));
    TensorRef a = ops::matmul(g, x, w1, {.trans_b = true}, "a");
    TensorRef b = ops::matmul(g, x, w2, {.trans_b = true}, "b");
    TensorRef x1 = ops::reshard(g, ops::add(g, x, ops::swiglu(g, a, b, "act"), "res"), "x1");
    g.set_layer(-1);
    loss = ops::cross_entropy(g, x1, targets, scale, -100, "loss");
    grads = build_backward(g, loss, {w1, w2});
    verify(g);
    for (int id = 0; id < g.num_ops(); ++id) {
      const OpKind k = g.op(id).kind;
      if (k == OpKind::kPlaceholder || k == OpKind::kParameter) continue;
      (g.op(id).backward ? backward : forward).push_back(id);
    }
  }
  // Output 0 of the op with this name.
  TensorRef value(const std::string& name) const {
    for (int id = 0; id < g.num_ops(); ++id) {
      if (g.op(id).name == name) return TensorRef{id, 0};
    }
    throw std::runtime_error("no op " + name);
  }
  // "a b act": op names, replays marked with '*'.
  std::string names(const std::vector<int>& ops) const {
    std::string s;
    for (int id : ops) s += (s.empty() ? "" : " ") + g.op(id).name;
    return s;
  }
  std::string names(const std::vector<StepPlan::Step>& steps) const {
    std::string s;
    for (const StepPlan::Step& st : steps) s += (s.empty() ? "" : " ") + g.op(st.op).name + (st.replay ? "*" : "");
    return s;
  }
  // "a: x w1 | b: ..." : after each step, the values freed (only steps that free something).
  std::string freed(const std::vector<int>& steps, const std::vector<std::vector<TensorRef>>& releases) const {
    std::string s;
    for (size_t k = 0; k < steps.size(); ++k) {
      if (releases[k].empty()) continue;
      std::vector<std::string> values;
      for (TensorRef t : releases[k]) values.push_back(g.tensor_name(t));
      std::sort(values.begin(), values.end());
      s += (s.empty() ? "" : " | ") + g.op(steps[k]).name + ":";
      for (const std::string& v : values) s += " " + v;
    }
    return s;
  }
  static std::vector<int> ops_of(const std::vector<StepPlan::Step>& steps) {
    std::vector<int> ops;
    for (const StepPlan::Step& st : steps) ops.push_back(st.op);
    return ops;
  }
};

TEST(StepPlan, WithoutRecomputeBKeepsWhatItReadsFromF) {
  OneLayer l;
  const StepPlan plan(l.g, l.forward, l.backward);
  EXPECT_EQ(l.names(plan.forward()), "a b act res x1 loss");
  EXPECT_EQ(l.names(plan.backward()),
            "loss:0.grad_seed loss.bwd x1.bwd act.bwd b.grad_a b.grad_b a.grad_a a.grad_b");  // nothing replayed
  // swiglu's backward reads a and b, the loss's reads x1 and lse; act and res are read in F only.
  for (const char* name : {"a", "b", "x1"}) EXPECT_TRUE(plan.saved_for_backward(l.value(name))) << name;
  EXPECT_TRUE(plan.saved_for_backward(TensorRef{l.loss.op, 1}));
  for (const char* name : {"act", "res"}) EXPECT_FALSE(plan.saved_for_backward(l.value(name))) << name;
  std::vector<TensorRef> keep = l.grads;
  keep.push_back(l.loss);
  const StepPlan::Releases r = plan.releases(keep);
  ASSERT_EQ(r.forward.size(), plan.forward().size());
  ASSERT_EQ(r.backward.size(), plan.backward().size());
  EXPECT_EQ(l.freed(plan.forward(), r.forward), "res: act | x1: res");
  // Each value after its last reader; one nothing reads (the unused d x of each matmul) right
  // after its writer; the weight gradients (kept) never.
  EXPECT_EQ(l.freed(OneLayer::ops_of(plan.backward()), r.backward),
            "loss.bwd: loss:0.grad_seed loss:1 scale targets x1 | x1.bwd: loss.bwd | act.bwd: a b x1.bwd | "
            "b.grad_a: b.grad_a w2 | b.grad_b: act.bwd:1 | a.grad_a: a.grad_a w1 | a.grad_b: act.bwd:0 x");
}

TEST(StepPlan, WithRecomputeBReplaysTheLayerBeforeItsBackward) {
  OneLayer l;
  const StepPlan plan(l.g, l.forward, l.backward, {.recompute = true});
  EXPECT_EQ(l.names(plan.forward()), "a b act res x1 loss");
  // The layer's ops but x1 (its boundary: the loss, outside the layer, reads it) run again just
  // before act.bwd, the first backward op reading one of their values.
  EXPECT_EQ(l.names(plan.backward()),
            "loss:0.grad_seed loss.bwd x1.bwd a* b* act* res* act.bwd b.grad_a b.grad_b a.grad_a a.grad_b");
  for (const char* name : {"a", "b", "act", "res"}) EXPECT_TRUE(plan.replayed(l.value(name).op)) << name;
  for (const char* name : {"x1", "loss"}) EXPECT_FALSE(plan.replayed(l.value(name).op)) << name;
  EXPECT_FALSE(plan.saved_for_backward(l.value("a")));
  EXPECT_TRUE(plan.saved_for_backward(l.value("x1")));
  std::vector<TensorRef> keep = l.grads;
  keep.push_back(l.loss);
  const StepPlan::Releases r = plan.releases(keep);
  // F now frees a and b too; B frees the replayed values after their last reader in B.
  EXPECT_EQ(l.freed(plan.forward(), r.forward), "act: a b | res: act | x1: res");
  EXPECT_EQ(l.freed(OneLayer::ops_of(plan.backward()), r.backward),
            "loss.bwd: loss:0.grad_seed loss:1 scale targets x1 | x1.bwd: loss.bwd | res: act res | "
            "act.bwd: a b x1.bwd | b.grad_a: b.grad_a w2 | b.grad_b: act.bwd:1 | a.grad_a: a.grad_a w1 | "
            "a.grad_b: act.bwd:0 x");
}

// A rank that does not hold an input (it receives a Reshard's output) never frees it.
TEST(StepPlan, InputsTheRunDoesNotHoldAreNotFreed) {
  OneLayer l;
  const StepPlan plan(l.g, l.forward, l.backward);
  const TensorRef x = l.value("x");
  const StepPlan::Releases r = plan.releases({l.loss}, [&](TensorRef t) { return t != x; });
  for (const auto& step : r.forward) EXPECT_EQ(std::count(step.begin(), step.end(), x), 0);
  for (const auto& step : r.backward) EXPECT_EQ(std::count(step.begin(), step.end(), x), 0);
}

}  // namespace
}  // namespace hspmd::graph
