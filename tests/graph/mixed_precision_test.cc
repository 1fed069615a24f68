// bf16 mixed precision in the graph: a two-layer model trained by the executor and graph::AdamW
// with bf16_operands matmuls equals a training loop written here by hand, which calls the float32
// kernels and rounds to bfloat16 (core/bfloat16.h, not the kernel under test) at exactly the
// points docs/mixed-precision.md names:
//   forward    h = bf(x) bf(W1)^T,  logits = bf(h) bf(W2)^T          (float32 accumulation)
//   backward   dW2 = bf(dlogits)^T bf(h),  dh = bf(dlogits) bf(W2),  dW1 = bf(dh)^T bf(x)
//   optimizer  clipping and AdamW on float32 master weights and float32 moments.
// The losses and weights must agree to relative 1e-6 over several steps; the same model in plain
// float32 must not (the rounding points matter), and the option must survive build_backward.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "hspmd/core/bfloat16.h"
#include "hspmd/graph/autograd.h"
#include "hspmd/graph/executor.h"
#include "hspmd/graph/ops.h"
#include "hspmd/graph/optimizer.h"
#include "hspmd/kernels/adamw.h"
#include "hspmd/kernels/cross_entropy.h"
#include "hspmd/kernels/elementwise.h"
#include "hspmd/kernels/matmul.h"
#include "hspmd/kernels/reduce.h"

namespace hspmd::graph {
namespace {

constexpr int64_t kTokens = 48, kHidden = 24, kInner = 40, kVocab = 30;

// Rounds every element of a float32 tensor to bfloat16, in a copy.
Tensor bf(const Tensor& x) {
  Tensor r = x.clone();
  for (int64_t i = 0; i < r.numel(); ++i) r.data<float>()[i] = static_cast<float>(BFloat16(r.data<float>()[i]));
  return r;
}

struct Model {
  Graph g;
  TensorRef loss;
  std::vector<TensorRef> params, grads;
  explicit Model(bool bf16) {
    const SymExpr T = SymExpr::symbol("T");
    TensorRef x = g.placeholder("x", {T, kHidden}, DType::kFloat32);
    TensorRef targets = g.placeholder("targets", {T}, DType::kInt64);
    TensorRef scale = g.placeholder("scale", {}, DType::kFloat32);
    TensorRef w1 = g.parameter("w1", Shape{kInner, kHidden}, DType::kFloat32, InitSpec::normal(0.3));
    TensorRef w2 = g.parameter("w2", Shape{kVocab, kInner}, DType::kFloat32, InitSpec::normal(0.3));
    params = {w1, w2};
    TensorRef h = ops::matmul(g, x, w1, {.trans_b = true, .bf16_operands = bf16}, "h");
    TensorRef logits = ops::matmul(g, h, w2, {.trans_b = true, .bf16_operands = bf16}, "logits");
    loss = ops::cross_entropy(g, logits, targets, scale, -100, "loss");
    grads = build_backward(g, loss, params);
  }
};

struct Data {
  Tensor x, targets, scale;
};

Data make_data() {
  Data d{Tensor::empty({kTokens, kHidden}, DType::kFloat32), Tensor::empty({kTokens}, DType::kInt64),
         Tensor::full(Shape{}, DType::kFloat32, 1.0 / kTokens)};
  for (int64_t i = 0; i < d.x.numel(); ++i) d.x.data<float>()[i] = static_cast<float>(std::sin(0.37 * i + 0.1));
  for (int64_t t = 0; t < kTokens; ++t) d.targets.data<int64_t>()[t] = (t * 7 + 3) % kVocab;
  return d;
}

const OptimizerOptions kOptimizer{.adamw = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1},
                                  .max_grad_norm = 0.5,
                                  .schedule = LrSchedule::constant(2e-2)};
constexpr int kSteps = 6;

struct Trajectory {
  std::vector<double> losses;
  TensorMap weights;
};

Trajectory train_graph(bool bf16) {
  Model m(bf16);
  TensorMap params = init_parameters(m.g, 7);
  AdamW opt(params, kOptimizer);
  const Data d = make_data();
  std::vector<TensorRef> fetches{m.loss};
  fetches.insert(fetches.end(), m.grads.begin(), m.grads.end());
  Executor ex(m.g, fetches);
  Trajectory out;
  for (int s = 0; s < kSteps; ++s) {
    std::vector<Tensor> r = ex.run({{"x", d.x}, {"targets", d.targets}, {"scale", d.scale}}, params);
    out.losses.push_back(r[0].element_as_double(0));
    opt.step(params, {{"w1", r[1]}, {"w2", r[2]}});
  }
  out.weights = params;
  return out;
}

Tensor mm(const Tensor& a, const Tensor& b, bool ta, bool tb, int64_t m, int64_t n) {
  Tensor out = Tensor::empty({m, n}, DType::kFloat32);
  kernels::matmul(a, b, out, {.trans_a = ta, .trans_b = tb});
  return out;
}

// The hand-written loop: float32 kernels, bf16 rounding at the documented points.
Trajectory train_reference() {
  Model shapes(false);  // only for the initial weights: init depends on (seed, name, index)
  TensorMap init = init_parameters(shapes.g, 7);
  Tensor w1 = init.at("w1").clone(), w2 = init.at("w2").clone();  // float32 master weights
  Tensor m1 = Tensor::zeros(w1.shape(), DType::kFloat32), v1 = Tensor::zeros(w1.shape(), DType::kFloat32);
  Tensor m2 = Tensor::zeros(w2.shape(), DType::kFloat32), v2 = Tensor::zeros(w2.shape(), DType::kFloat32);
  const Data d = make_data();
  Trajectory out;
  for (int s = 1; s <= kSteps; ++s) {
    const Tensor xb = bf(d.x), w1b = bf(w1), w2b = bf(w2);
    const Tensor h = mm(xb, w1b, false, true, kTokens, kInner);
    const Tensor hb = bf(h);
    const Tensor logits = mm(hb, w2b, false, true, kTokens, kVocab);
    Tensor losses = Tensor::empty({kTokens}, DType::kFloat32), lse = Tensor::empty({kTokens}, DType::kFloat32);
    kernels::cross_entropy_fwd(logits, d.targets, losses, lse);
    double loss = 0;
    for (int64_t t = 0; t < kTokens; ++t) loss += losses.data<float>()[t];
    out.losses.push_back(loss / kTokens);
    const Tensor dlosses = Tensor::full(Shape{kTokens}, DType::kFloat32, 1.0 / kTokens);
    Tensor dlogits = Tensor::empty(logits.shape(), DType::kFloat32);
    kernels::cross_entropy_bwd(logits, d.targets, lse, dlosses, dlogits);
    const Tensor dlb = bf(dlogits);
    Tensor dw2 = mm(dlb, hb, true, false, kVocab, kInner);
    const Tensor dh = mm(dlb, w2b, false, false, kTokens, kInner);
    Tensor dw1 = mm(bf(dh), xb, true, false, kInner, kHidden);
    // Global-norm clipping over both float32 gradients, then AdamW on the float32 masters.
    const double norm = std::sqrt(kernels::sum_squares(dw1) + kernels::sum_squares(dw2));
    if (norm > kOptimizer.max_grad_norm) {
      for (const Tensor& g : {dw1, dw2}) kernels::scale(g, kOptimizer.max_grad_norm / norm, g);
    }
    kernels::AdamWOptions a = kOptimizer.adamw;
    a.lr = kOptimizer.schedule.at(s);
    kernels::adamw_step(w1, dw1, m1, v1, s, a);
    kernels::adamw_step(w2, dw2, m2, v2, s, a);
  }
  out.weights = {{"w1", w1}, {"w2", w2}};
  return out;
}

double relative_difference(const Tensor& a, const Tensor& b) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.element_as_double(i), y = b.element_as_double(i);
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return std::sqrt(diff / norm);
}

TEST(MixedPrecision, TrainingEqualsTheHandWrittenBf16Loop) {
  const Trajectory graph = train_graph(true), ref = train_reference();
  ASSERT_EQ(graph.losses.size(), ref.losses.size());
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    EXPECT_NEAR(graph.losses[s], ref.losses[s], 1e-6 * std::abs(ref.losses[s])) << "step " << s + 1;
  }
  EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the loop must train";
  for (const char* name : {"w1", "w2"}) {
    EXPECT_EQ(graph.weights.at(name).dtype(), DType::kFloat32) << name << ": master weights stay float32";
    EXPECT_LT(relative_difference(graph.weights.at(name), ref.weights.at(name)), 1e-6) << name;
  }
}

TEST(MixedPrecision, Float32TrainingDiffersFromTheBf16Loop) {
  const Trajectory fp32 = train_graph(false), ref = train_reference();
  double worst = 0;
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    worst = std::max(worst, std::abs(fp32.losses[s] - ref.losses[s]) / std::abs(ref.losses[s]));
  }
  EXPECT_GT(worst, 1e-4) << "bf16 rounding must be visible at this size";
  EXPECT_LT(worst, 2e-2) << "but small";
}

TEST(MixedPrecision, BackwardMatmulsInheritTheForwardPrecision) {
  for (bool bf16 : {false, true}) {
    Model m(bf16);
    int matmuls = 0;
    for (int id = 0; id < m.g.num_ops(); ++id) {
      const Op& op = m.g.op(id);
      if (op.kind != OpKind::kMatmul) continue;
      ++matmuls;
      EXPECT_EQ(op.attrs.bf16_operands, bf16) << op.name;
    }
    // Two forward; backward: dW2, dh, dW1 and dx (built by autograd, pruned by the executor).
    EXPECT_EQ(matmuls, 2 + 4);
  }
}

TEST(MixedPrecision, Bf16OperandsNeedFloat32) {
  Graph g;
  TensorRef a = g.placeholder("a", {4, 4}, DType::kFloat64);
  try {
    ops::matmul(g, a, a, {.bf16_operands = true}, "mm");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bf16 operands are rounded from float32, input 0 is float64"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hspmd::graph
