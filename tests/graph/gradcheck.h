// Test helper (header-only, so tests/models can use it too): checks a graph's autograd gradients
// against central finite differences in float64.
//
//   Graph g;  ... build a scalar float64 loss ...
//   double err = check_gradients(g, loss, {w, x}, feeds, params);   // builds the backward
//   EXPECT_LT(err, 1e-7);
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "hspmd/core/random.h"
#include "hspmd/graph/autograd.h"
#include "hspmd/graph/executor.h"
#include "hspmd/graph/verifier.h"

namespace hspmd::graph::testing {

inline Tensor uniform(const Shape& shape, uint64_t seed, double low = -1.0, double high = 1.0,
                      DType dtype = DType::kFloat64) {
  Tensor t = Tensor::empty(shape, dtype);
  fill_uniform(t, seed, low, high);
  return t;
}

inline double run_loss(const Graph& g, TensorRef loss, const TensorMap& feeds, const TensorMap& params) {
  Executor ex(g, {loss});
  return ex.run(feeds, params)[0].element_as_double(0);
}

// max_i |a_i - b_i| / max(max_i |b_i|, 1e-30)
inline double relative_error(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(actual.numel(), expected.numel());
  double diff = 0, scale = 1e-30;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    diff = std::max(diff, std::abs(actual.element_as_double(i) - expected.element_as_double(i)));
    scale = std::max(scale, std::abs(expected.element_as_double(i)));
  }
  return diff / scale;
}

// Builds d loss / d wrt into g, verifies g, and returns the worst relative error between each
// analytic gradient and central differences (step eps). wrt are placeholders or parameters, found
// by name in feeds / params (perturbed in place and restored).
inline double check_gradients(Graph& g, TensorRef loss, const std::vector<TensorRef>& wrt, TensorMap& feeds,
                              TensorMap& params, double eps = 1e-6) {
  std::vector<TensorRef> grads = build_backward(g, loss, wrt);
  verify(g);
  Executor ex(g, grads);
  std::vector<Tensor> analytic = ex.run(feeds, params);
  double worst = 0;
  for (size_t w = 0; w < wrt.size(); ++w) {
    const std::string& name = g.op(wrt[w].op).name;
    EXPECT_TRUE(grads[w].valid()) << "no gradient for " << name;
    if (!grads[w].valid()) return 1e30;
    Tensor& x = feeds.count(name) ? feeds.at(name) : params.at(name);
    Tensor numeric = Tensor::empty(x.shape(), DType::kFloat64);
    double* px = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      double saved = px[i];
      px[i] = saved + eps;
      double plus = run_loss(g, loss, feeds, params);
      px[i] = saved - eps;
      double minus = run_loss(g, loss, feeds, params);
      px[i] = saved;
      numeric.data<double>()[i] = (plus - minus) / (2 * eps);
    }
    double largest = 0;
    for (int64_t i = 0; i < numeric.numel(); ++i) largest = std::max(largest, std::abs(numeric.data<double>()[i]));
    EXPECT_GT(largest, 1e-8) << "gradient of " << name << " is zero: the check would prove nothing";
    double err = relative_error(analytic[w], numeric);
    EXPECT_LT(err, 1e-6) << "gradient of " << name;
    worst = std::max(worst, err);
  }
  return worst;
}

}  // namespace hspmd::graph::testing
