// adamw_step against a hand-written float64 reference over several steps (weight decay, bias
// correction), a closed form for the first step, and argument errors.
#include "hspmd/kernels/adamw.h"
#include "hspmd/kernels/elementwise.h"

#include <gmock/gmock.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernel_testlib.h"

namespace hspmd::kernels {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using hspmd::testing::all_close;
using hspmd::testing::random_tensor;

// The header's formula, term by term, in double.
struct ReferenceAdamW {
  std::vector<double> param, m, v;

  void step(const Tensor& grad, int64_t t, const AdamWOptions& o) {
    for (size_t i = 0; i < param.size(); ++i) {
      double g = grad.element_as_double(static_cast<int64_t>(i));
      param[i] *= 1 - o.lr * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
      double m_hat = m[i] / (1 - std::pow(o.beta1, static_cast<double>(t)));
      double v_hat = v[i] / (1 - std::pow(o.beta2, static_cast<double>(t)));
      param[i] -= o.lr * m_hat / (std::sqrt(v_hat) + o.eps);
    }
  }
};

Tensor as_tensor(const std::vector<double>& values, const Shape& shape) {
  return Tensor::from_vector<double>(shape, values);
}

TEST(AdamW, MatchesReferenceOverSeveralSteps) {
  const AdamWOptions options{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Shape& shape : {Shape{7, 13}, Shape{1}, Shape{0}}) {
      Tensor param = random_tensor(shape, dtype, 1);
      Tensor m = Tensor::zeros(shape, dtype), v = Tensor::zeros(shape, dtype);
      ReferenceAdamW ref;
      for (int64_t i = 0; i < param.numel(); ++i) ref.param.push_back(param.element_as_double(i));
      ref.m.assign(ref.param.size(), 0.0);
      ref.v.assign(ref.param.size(), 0.0);
      for (int64_t t = 1; t <= 6; ++t) {
        Tensor grad = random_tensor(shape, dtype, 100 + static_cast<uint64_t>(t), -2, 2);
        adamw_step(param, grad, m, v, t, options);
        ref.step(grad, t, options);
      }
      double rtol = dtype == DType::kFloat64 ? 1e-12 : 2e-5, atol = dtype == DType::kFloat64 ? 1e-14 : 1e-6;
      EXPECT_TRUE(all_close(param, as_tensor(ref.param, shape), rtol, atol, "param " + param.to_string()));
      EXPECT_TRUE(all_close(m, as_tensor(ref.m, shape), rtol, atol, "m " + param.to_string()));
      EXPECT_TRUE(all_close(v, as_tensor(ref.v, shape), rtol, atol, "v " + param.to_string()));
    }
  }
}

// Step 1 from zero moments: m_hat = g and v_hat = g^2, so the update is lr * g / (|g| + eps), after
// the decay factor 1 - lr * wd.
TEST(AdamW, FirstStepIsSignedLearningRate) {
  const AdamWOptions options{.lr = 0.5, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-3, .weight_decay = 0.2};
  Tensor param = Tensor::from_vector<double>({3}, {1.0, -2.0, 0.5});
  Tensor grad = Tensor::from_vector<double>({3}, {0.25, 4.0, -1.0});
  Tensor m = Tensor::zeros({3}, DType::kFloat64), v = Tensor::zeros({3}, DType::kFloat64);
  adamw_step(param, grad, m, v, 1, options);
  const double decay = 1 - 0.5 * 0.2;
  Tensor expected = Tensor::from_vector<double>(
      {3}, {1.0 * decay - 0.5 * 0.25 / 0.251, -2.0 * decay - 0.5 * 4.0 / 4.001, 0.5 * decay + 0.5 * 1.0 / 1.001});
  EXPECT_TRUE(all_close(param, expected, 1e-12, 1e-14, "param after step 1"));
  EXPECT_TRUE(all_close(m, Tensor::from_vector<double>({3}, {0.05, 0.8, -0.2}), 1e-12, 1e-14, "m after step 1"));
}

// grad_scale (clipping's factor) gives exactly the step on the gradient scaled first by
// kernels::scale, and leaves the gradient unchanged (simd_test runs a scaled step at every SIMD level).
TEST(AdamW, GradScaleEqualsScalingTheGradientFirst) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const Shape shape{3, 37};  // not a multiple of any vector width
    Tensor grad = random_tensor(shape, dtype, 5, -3, 3), grad_before = grad.clone();
    Tensor scaled = Tensor::empty(shape, dtype);
    kernels::scale(grad, 0.37, scaled);
    Tensor p1 = random_tensor(shape, dtype, 6), m1 = random_tensor(shape, dtype, 7), v1 = random_tensor(shape, dtype, 8, 0, 1);
    Tensor p2 = p1.clone(), m2 = m1.clone(), v2 = v1.clone();
    adamw_step(p1, grad, m1, v1, 4, {.lr = 1e-2, .weight_decay = 0.1, .grad_scale = 0.37});
    adamw_step(p2, scaled, m2, v2, 4, {.lr = 1e-2, .weight_decay = 0.1});
    EXPECT_EQ(std::memcmp(p1.raw_data(), p2.raw_data(), p1.nbytes()), 0) << dtype_name(dtype);
    EXPECT_EQ(std::memcmp(m1.raw_data(), m2.raw_data(), m1.nbytes()), 0) << dtype_name(dtype);
    EXPECT_EQ(std::memcmp(v1.raw_data(), v2.raw_data(), v1.nbytes()), 0) << dtype_name(dtype);
    EXPECT_EQ(std::memcmp(grad.raw_data(), grad_before.raw_data(), grad.nbytes()), 0) << dtype_name(dtype);
  }
  Tensor p = random_tensor({4}, DType::kFloat32, 2), m = Tensor::zeros({4}, DType::kFloat32), v = m.clone();
  EXPECT_THAT([&] { adamw_step(p, p, m, v, 1, {.grad_scale = std::nan("")}); },
              ThrowsMessage<Error>(HasSubstr("adamw_step: grad_scale must be finite")));
}

TEST(AdamW, RejectsBadArguments) {
  Tensor p = random_tensor({4}, DType::kFloat32, 2), m = Tensor::zeros({4}, DType::kFloat32), v = m.clone();
  Tensor g5 = random_tensor({5}, DType::kFloat32, 3);
  EXPECT_THAT([&] { adamw_step(p, g5, m, v, 1, {}); },
              ThrowsMessage<Error>(HasSubstr("adamw_step: 'param' float32[4] and 'grad' float32[5] differ in numel")));
  Tensor v64 = Tensor::zeros({4}, DType::kFloat64);
  EXPECT_THAT([&] { adamw_step(p, p, m, v64, 1, {}); },
              ThrowsMessage<Error>(HasSubstr("adamw_step: 'v' is float64[4] but 'param' is float32[4]")));
  EXPECT_THAT([&] { adamw_step(p, p, m, v, 0, {}); },
              ThrowsMessage<Error>(HasSubstr("adamw_step: step counts from 1, got 0")));
  EXPECT_THAT([&] { adamw_step(p, p, m, v, 1, {.beta1 = 1.0}); },
              ThrowsMessage<Error>(HasSubstr("adamw_step: betas must lie in [0, 1)")));
  Tensor bf = Tensor::zeros({4}, DType::kBFloat16);
  EXPECT_THAT([&] { adamw_step(bf, bf, bf, bf, 1, {}); },
              ThrowsMessage<Error>(HasSubstr("adamw_step: 'param' is bfloat16[4], expected float32 or float64")));
}

}  // namespace
}  // namespace hspmd::kernels
