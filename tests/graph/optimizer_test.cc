// AdamW against a hand-computed step, global-norm clipping, learning-rate schedules.
#include "hspmd/graph/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>
#include <numbers>

namespace hspmd::graph {
namespace {

// An independent float64 reference of one training step, written from the formulas (Loshchilov &
// Hutter's decoupled AdamW; global-norm clipping; linear warm-up then cosine decay) rather than
// from the implementation: nothing here calls hspmd code.
struct ReferenceAdamW {
  double peak_lr, min_lr;
  int64_t warmup, total;
  double beta1, beta2, eps, weight_decay, max_grad_norm;
  std::map<std::string, std::vector<double>> p, m, v;
  std::map<std::string, bool> decayed;  // matrices only

  double lr(int64_t step) const {
    if (step <= warmup) return peak_lr * static_cast<double>(step) / static_cast<double>(warmup);
    if (step >= total) return min_lr;
    const double progress = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
    return min_lr + (peak_lr - min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
  }
  // Returns the gradient norm before clipping.
  double step(int64_t t, std::map<std::string, std::vector<double>> g) {
    double squares = 0;
    for (const auto& [name, values] : g) {
      for (double x : values) squares += x * x;
    }
    const double norm = std::sqrt(squares);
    const double scale = max_grad_norm > 0 && norm > max_grad_norm ? max_grad_norm / norm : 1.0;
    const double rate = lr(t);
    for (auto& [name, values] : p) {
      for (size_t i = 0; i < values.size(); ++i) {
        const double gi = g.at(name)[i] * scale;
        m[name][i] = beta1 * m[name][i] + (1 - beta1) * gi;
        v[name][i] = beta2 * v[name][i] + (1 - beta2) * gi * gi;
        const double m_hat = m[name][i] / (1 - std::pow(beta1, static_cast<double>(t)));
        const double v_hat = v[name][i] / (1 - std::pow(beta2, static_cast<double>(t)));
        if (decayed[name]) values[i] -= rate * weight_decay * values[i];
        values[i] -= rate * m_hat / (std::sqrt(v_hat) + eps);
      }
    }
    return norm;
  }
};

// Gradients that change every step, large enough in some steps to be clipped and small in others.
std::vector<float> gradient(size_t n, int64_t step, int salt) {
  const double scale = step % 3 == 0 ? 0.05 : 2.0;
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] = static_cast<float>(scale * std::sin(0.7 * static_cast<double>(i + 1) * (salt + 1) + 1.3 * step));
  }
  return g;
}

TEST(AdamW, MatchesAFloat64ReferenceWithClippingAndWarmupCosine) {
  const std::vector<float> w0{1.0f, -2.0f, 0.5f, 0.0f, 0.25f, -1.5f}, b0{0.25f, -0.75f, 0.1f};
  TensorMap params{{"w", Tensor::from_vector<float>(Shape{2, 3}, w0)}, {"b", Tensor::from_vector<float>(Shape{3}, b0)}};
  OptimizerOptions o;
  o.adamw = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  o.max_grad_norm = 1.0;
  o.schedule = LrSchedule::warmup_cosine({.peak_lr = 0.01, .min_lr = 0.001, .warmup_steps = 3, .total_steps = 8});
  AdamW opt(params, o);

  ReferenceAdamW ref{.peak_lr = 0.01, .min_lr = 0.001, .warmup = 3, .total = 8, .beta1 = 0.9, .beta2 = 0.95,
                     .eps = 1e-8, .weight_decay = 0.1, .max_grad_norm = 1.0, .p = {}, .m = {}, .v = {}, .decayed = {}};
  ref.p["w"].assign(w0.begin(), w0.end());
  ref.p["b"].assign(b0.begin(), b0.end());
  ref.m = {{"w", std::vector<double>(6)}, {"b", std::vector<double>(3)}};
  ref.v = ref.m;
  ref.decayed = {{"w", true}, {"b", false}};  // vectors are not decayed by default

  int clipped_steps = 0;
  for (int64_t step = 1; step <= 10; ++step) {  // past total_steps: the schedule holds min_lr
    const std::vector<float> gw = gradient(6, step, 0), gb = gradient(3, step, 1);
    TensorMap grads{{"w", Tensor::from_vector(Shape{2, 3}, gw)}, {"b", Tensor::from_vector(Shape{3}, gb)}};
    const AdamW::StepInfo info = opt.step(params, grads);
    const double norm = ref.step(step, {{"w", {gw.begin(), gw.end()}}, {"b", {gb.begin(), gb.end()}}});
    clipped_steps += norm > 1.0 ? 1 : 0;
    EXPECT_EQ(info.step, step);
    EXPECT_NEAR(info.lr, ref.lr(step), 1e-12) << "step " << step;
    EXPECT_NEAR(info.grad_norm, norm, 1e-5 * norm) << "step " << step;
    for (const char* name : {"w", "b"}) {
      const std::vector<float> p = params.at(name).to_vector<float>();
      const std::vector<float> m = opt.exp_avg().at(name).to_vector<float>();
      const std::vector<float> v = opt.exp_avg_sq().at(name).to_vector<float>();
      for (size_t i = 0; i < p.size(); ++i) {
        EXPECT_NEAR(p[i], ref.p[name][i], 2e-6) << name << "[" << i << "] step " << step;
        EXPECT_NEAR(m[i], ref.m[name][i], 1e-6) << name << "[" << i << "] step " << step;
        EXPECT_NEAR(v[i], ref.v[name][i], 1e-6) << name << "[" << i << "] step " << step;
      }
    }
  }
  // The gradients exercise both branches of clipping.
  EXPECT_GT(clipped_steps, 0);
  EXPECT_LT(clipped_steps, 10);
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
