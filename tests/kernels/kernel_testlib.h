// Shared helpers for kernel tests: random inputs, closeness checks that report the worst element,
// and central finite differences for backward kernels.
#pragma once

#include "error_of.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "hspmd/core/tensor.h"
#include "hspmd/kernels/gemm_backend.h"

namespace hspmd::testing {

// Uniform in [low, high) (floating dtypes), reproducible from seed. Never all zeros.
Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double low = -1.0, double high = 1.0);
// Integers uniform in [low, high) for int32/int64 tensors (token ids, positions).
Tensor random_ints(const Shape& shape, DType dtype, uint64_t seed, int64_t low, int64_t high);

// Passes when every |actual - expected| <= atol + rtol * |expected|; otherwise the failure names the
// worst element (flat index), both values and `what`.
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double rtol, double atol,
                                     const std::string& what = "");

// d loss / d x by central differences, perturbing x (float64) in place and restoring it:
// (loss(x + eps e_i) - loss(x - eps e_i)) / 2 eps for every element i. Returns a float64 tensor
// shaped like x.
Tensor numeric_gradient(const std::function<double()>& loss, Tensor& x, double eps = 1e-6);

// max_i |a_i - b_i| / max(max_i |b_i|, tiny): one scale-aware relative error for a whole tensor.
double max_relative_error(const Tensor& actual, const Tensor& expected);

// sum_i a_i * b_i in float64 (the scalar loss sum(out * w) used to test backward kernels).
double dot(const Tensor& a, const Tensor& b);

// A test run once per bf16 GEMM (kernels/gemm_backend.h): rounded operands on the float32 GEMM, and
// oneDNN's bf16 kernels where the CPU has them (skipped elsewhere). The choice is restored after.
class EachBf16Gemm : public ::testing::TestWithParam<kernels::Bf16Gemm> {
 protected:
  void SetUp() override;
  void TearDown() override;

 private:
  kernels::Bf16Gemm previous_ = kernels::Bf16Gemm::kFloat32;
};
// The values and test names to instantiate an EachBf16Gemm suite with.
::testing::internal::ParamGenerator<kernels::Bf16Gemm> each_bf16_gemm();
std::string bf16_gemm_test_name(const ::testing::TestParamInfo<kernels::Bf16Gemm>& info);

}  // namespace hspmd::testing
