// AdamW against a hand-computed step, global-norm clipping, learning-rate schedules.
#include "hspmd/graph/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

namespace hspmd::graph {
namespace {

TEST(AdamW, MatchesHandComputedSteps) {
  TensorMap params{{"w", Tensor::from_vector<float>(Shape{2, 2}, {1.0f, -2.0f, 0.5f, 0.0f})},
                   {"b", Tensor::from_vector<float>(Shape{2}, {0.25f, -0.75f})}};
  const std::vector<float> gw{0.1f, -0.2f, 0.3f, 0.0f}, gb{-0.5f, 0.05f};
  OptimizerOptions o;
  o.adamw = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  o.schedule = LrSchedule::constant(0.01);
  AdamW opt(params, o);

  // Reference in double: decoupled decay on the matrix only; bias correction per step.
  std::vector<double> w{1.0, -2.0, 0.5, 0.0}, b{0.25, -0.75}, mw(4), vw(4), mb(2), vb(2);
  auto reference = [&](std::vector<double>& p, const std::vector<float>& g, std::vector<double>& m,
                       std::vector<double>& v, double decay, int step) {
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - 0.01 * decay;
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.95 * v[i] + 0.05 * g[i] * g[i];
      double mhat = m[i] / (1 - std::pow(0.9, step)), vhat = v[i] / (1 - std::pow(0.95, step));
      p[i] -= 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
    }
  };
  for (int step = 1; step <= 3; ++step) {
    TensorMap grads{{"w", Tensor::from_vector(Shape{2, 2}, gw)}, {"b", Tensor::from_vector(Shape{2}, gb)}};
    AdamW::StepInfo info = opt.step(params, grads);
    EXPECT_EQ(info.step, step);
    EXPECT_DOUBLE_EQ(info.lr, 0.01);
    reference(w, gw, mw, vw, 0.1, step);
    reference(b, gb, mb, vb, 0.0, step);  // vectors are not decayed by default
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(params.at("w").data<float>()[i], w[i], 1e-6) << "step " << step;
    for (int i = 0; i < 2; ++i) EXPECT_NEAR(params.at("b").data<float>()[i], b[i], 1e-6) << "step " << step;
  }
  // The first step of Adam moves each weight by about lr (sign of the gradient), before decay.
  EXPECT_NEAR(w[0], 1.0 * std::pow(1 - 0.001, 3) - 0.03, 1e-3);
}

TEST(AdamW, RefusesMismatchedGradients) {
  TensorMap params{{"w", Tensor::zeros({3}, DType::kFloat32)}};
  AdamW opt(params, {});
  EXPECT_THROW(opt.step(params, {{"w", Tensor::zeros({4}, DType::kFloat32)}}), Error);
  EXPECT_THROW(opt.step(params, {}), Error);
  TensorMap bf16{{"w", Tensor::zeros({3}, DType::kBFloat16)}};
  EXPECT_THROW(AdamW(bf16, {}), Error);  // master weights are float32
}

TEST(ClipGradNorm, ScalesByMaxNormOverTotalNorm) {
  // Total norm over both tensors: sqrt(3^2 + 4^2 + 12^2) = 13.
  TensorMap grads{{"a", Tensor::from_vector<float>(Shape{2}, {3, 4})}, {"b", Tensor::from_vector<float>(Shape{1}, {12})}};
  EXPECT_NEAR(clip_grad_norm(grads, 26.0), 13.0, 1e-6);  // below the limit: unchanged
  EXPECT_EQ(grads.at("a").to_vector<float>(), (std::vector<float>{3, 4}));
  EXPECT_NEAR(clip_grad_norm(grads, 1.3), 13.0, 1e-6);  // returns the norm before clipping
  EXPECT_NEAR(grads.at("a").data<float>()[0], 0.3, 1e-6);
  EXPECT_NEAR(grads.at("a").data<float>()[1], 0.4, 1e-6);
  EXPECT_NEAR(grads.at("b").data<float>()[0], 1.2, 1e-6);
  EXPECT_NEAR(clip_grad_norm(grads, 0.0), 1.3, 1e-6);  // 0 disables clipping
}

TEST(LrSchedule, ConstantAndWarmupCosine) {
  EXPECT_DOUBLE_EQ(LrSchedule::constant(3e-4).at(1), 3e-4);
  EXPECT_DOUBLE_EQ(LrSchedule::constant(3e-4).at(1000), 3e-4);
  LrSchedule s = LrSchedule::warmup_cosine({.peak_lr = 1e-3, .min_lr = 1e-4, .warmup_steps = 10, .total_steps = 100});
  EXPECT_DOUBLE_EQ(s.at(1), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(5), 5e-4);
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);
  EXPECT_NEAR(s.at(55), 5.5e-4, 1e-15);  // half-way through the cosine
  EXPECT_NEAR(s.at(33), 1e-4 + 9e-4 * 0.5 * (1 + std::cos(std::numbers::pi * 23.0 / 90.0)), 1e-15);
  EXPECT_DOUBLE_EQ(s.at(100), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(150), 1e-4);
  EXPECT_THROW(s.at(0), Error);
  EXPECT_THROW(LrSchedule::warmup_cosine({.warmup_steps = 20, .total_steps = 10}), Error);
}

}  // namespace
}  // namespace hspmd::graph
