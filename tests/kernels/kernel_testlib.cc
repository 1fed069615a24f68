#include "kernel_testlib.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "hspmd/core/philox.h"
#include "hspmd/core/random.h"

namespace hspmd::testing {

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double low, double high) {
  Tensor t = Tensor::empty(shape, dtype);
  fill_uniform(t, seed, low, high);
  return t;
}

Tensor random_ints(const Shape& shape, DType dtype, uint64_t seed, int64_t low, int64_t high) {
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t v = low + static_cast<int64_t>(philox_uniform(seed, 0, i) * static_cast<double>(high - low));
    if (dtype == DType::kInt32) {
      t.data<int32_t>()[i] = static_cast<int32_t>(v);
    } else {
      t.data<int64_t>()[i] = v;
    }
  }
  return t;
}

::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double rtol, double atol,
                                     const std::string& what) {
  if (actual.numel() != expected.numel()) {
    return ::testing::AssertionFailure() << what << ": " << actual.to_string() << " vs " << expected.to_string();
  }
  int64_t worst = -1;
  double worst_excess = 0;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    double a = actual.element_as_double(i), e = expected.element_as_double(i);
    double excess = std::abs(a - e) - (atol + rtol * std::abs(e));
    if (std::isnan(a) != std::isnan(e)) excess = INFINITY;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (worst < 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": element " << worst << " is " << actual.element_as_double(worst)
                                       << ", expected " << expected.element_as_double(worst) << " (rtol " << rtol
                                       << ", atol " << atol << ", shape " << actual.shape().to_string() << ")";
}

Tensor numeric_gradient(const std::function<double()>& loss, Tensor& x, double eps) {
  Tensor grad = Tensor::empty(x.shape(), DType::kFloat64);
  double* px = x.data<double>();
  double* pg = grad.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    double saved = px[i];
    px[i] = saved + eps;
    double plus = loss();
    px[i] = saved - eps;
    double minus = loss();
    px[i] = saved;
    pg[i] = (plus - minus) / (2 * eps);
  }
  return grad;
}

double max_relative_error(const Tensor& actual, const Tensor& expected) {
  double scale = 1e-30, diff = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    scale = std::max(scale, std::abs(expected.element_as_double(i)));
    diff = std::max(diff, std::abs(actual.element_as_double(i) - expected.element_as_double(i)));
  }
  return diff / scale;
}

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.element_as_double(i) * b.element_as_double(i);
  return s;
}

void EachBf16Gemm::SetUp() {
  if (GetParam() == kernels::Bf16Gemm::kOneDnn && !kernels::onednn_has_bf16_kernels()) {
    GTEST_SKIP() << "oneDNN has no bf16 kernels for this CPU (" << kernels::onednn_isa() << ")";
  }
  previous_ = kernels::bf16_gemm();
  kernels::set_bf16_gemm(GetParam());
}

void EachBf16Gemm::TearDown() { kernels::set_bf16_gemm(previous_); }

::testing::internal::ParamGenerator<kernels::Bf16Gemm> each_bf16_gemm() {
  return ::testing::Values(kernels::Bf16Gemm::kFloat32, kernels::Bf16Gemm::kOneDnn);
}

std::string bf16_gemm_test_name(const ::testing::TestParamInfo<kernels::Bf16Gemm>& info) {
  return kernels::bf16_gemm_name(info.param);
}

}  // namespace hspmd::testing
