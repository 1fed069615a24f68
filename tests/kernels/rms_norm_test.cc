#include "hspmd/kernels/rms_norm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <string>
#include <tuple>

#include "kernels/kernel_testlib.h"

namespace hspmd::kernels {
namespace {

using hspmd::testing::all_close;
using hspmd::testing::dot;
using hspmd::testing::max_relative_error;
using hspmd::testing::numeric_gradient;
using hspmd::testing::random_tensor;

constexpr double kEps = 1e-5;

// Plain double loops: y and rstd of RMSNorm over the last dim.
void reference_fwd(const Tensor& x, const Tensor& w, Tensor& y, Tensor& rstd) {
  const int64_t h = x.dim(-1), rows = x.numel() / h;
  y = Tensor::empty(x.shape(), DType::kFloat64);
  rstd = Tensor::empty({rows}, DType::kFloat64);
  for (int64_t t = 0; t < rows; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < h; ++i) ss += std::pow(x.element_as_double(t * h + i), 2);
    const double r = 1 / std::sqrt(ss / h + kEps);
    rstd.data<double>()[t] = r;
    for (int64_t i = 0; i < h; ++i) {
      y.data<double>()[t * h + i] = x.element_as_double(t * h + i) * r * w.element_as_double(i);
    }
  }
}

struct Outputs {
  Tensor y, rstd;
};

Outputs run_fwd(const Tensor& x, const Tensor& w, double eps = kEps) {
  Outputs o{Tensor::empty(x.shape(), x.dtype()), Tensor::empty({x.numel() / x.dim(-1)}, x.dtype())};
  rms_norm_fwd(x, w, eps, o.y, o.rstd);
  return o;
}

TEST(RmsNorm, ForwardMatchesReference) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const double tol = dtype == DType::kFloat32 ? 1e-5 : 1e-12;
    for (const Shape& shape : {Shape{5, 7}, Shape{1, 1}, Shape{2, 3, 13}, Shape{3, 1}, Shape{9}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape.to_string());
      Tensor x = random_tensor(shape, dtype, 1, -2, 2);
      Tensor w = random_tensor({shape.dim(-1)}, dtype, 2, 0.5, 1.5);
      Outputs o = run_fwd(x, w);
      Tensor y_ref, rstd_ref;
      reference_fwd(x, w, y_ref, rstd_ref);
      EXPECT_TRUE(all_close(o.y, y_ref, tol, tol, "y"));
      EXPECT_TRUE(all_close(o.rstd, rstd_ref, tol, 0, "rstd"));
    }
  }
}

TEST(RmsNorm, EmptyRowsWriteNothingAndZeroDweight) {
  Tensor x = Tensor::empty({0, 6}, DType::kFloat32);
  Tensor w = random_tensor({6}, DType::kFloat32, 3);
  Outputs o = run_fwd(x, w);
  EXPECT_EQ(o.y.numel(), 0);
  Tensor dx = Tensor::empty({0, 6}, DType::kFloat32);
  Tensor dw = Tensor::full({6}, DType::kFloat32, 7.0);
  rms_norm_bwd(x, w, o.rstd, x, dx, dw);
  EXPECT_TRUE(all_close(dw, Tensor::zeros({6}, DType::kFloat32), 0, 0, "dweight of no rows"));
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  for (const Shape& shape : {Shape{3, 5}, Shape{4, 1}, Shape{2, 2, 3}}) {
    SCOPED_TRACE(shape.to_string());
    Tensor x = random_tensor(shape, DType::kFloat64, 4, -2, 2);
    Tensor w = random_tensor({shape.dim(-1)}, DType::kFloat64, 5, 0.5, 1.5);
    Tensor probe = random_tensor(shape, DType::kFloat64, 6);  // loss = sum(y * probe)
    // A large eps keeps dy/dx of H = 1 rows (eps / (x^2 + eps)^1.5) well above finite-difference noise.
    const double eps = 0.1;
    auto loss = [&] { return dot(run_fwd(x, w, eps).y, probe); };
    Tensor dx_num = numeric_gradient(loss, x);
    Tensor dw_num = numeric_gradient(loss, w);

    Outputs o = run_fwd(x, w, eps);
    Tensor dx = Tensor::empty(shape, DType::kFloat64);
    Tensor dw = Tensor::empty({shape.dim(-1)}, DType::kFloat64);
    rms_norm_bwd(x, w, o.rstd, probe, dx, dw);
    EXPECT_LT(max_relative_error(dx, dx_num), 1e-6);
    EXPECT_LT(max_relative_error(dw, dw_num), 1e-6);
  }
}

TEST(RmsNorm, Float32BackwardMatchesFloat64) {
  const Shape shape{6, 17};
  Tensor x64 = random_tensor(shape, DType::kFloat64, 7, -2, 2);
  Tensor w64 = random_tensor({17}, DType::kFloat64, 8, 0.5, 1.5);
  Tensor dy64 = random_tensor(shape, DType::kFloat64, 9);
  Tensor x32 = random_tensor(shape, DType::kFloat32, 7, -2, 2);
  Tensor w32 = random_tensor({17}, DType::kFloat32, 8, 0.5, 1.5);
  Tensor dy32 = random_tensor(shape, DType::kFloat32, 9);
  Tensor dx[2], dw[2];
  int k = 0;
  for (auto [x, w, dy] : {std::tuple{x64, w64, dy64}, std::tuple{x32, w32, dy32}}) {
    dx[k] = Tensor::empty(shape, x.dtype());
    dw[k] = Tensor::empty({17}, x.dtype());
    rms_norm_bwd(x, w, run_fwd(x, w).rstd, dy, dx[k], dw[k]);
    ++k;
  }
  EXPECT_LT(max_relative_error(dx[1], dx[0]), 1e-5);
  EXPECT_LT(max_relative_error(dw[1], dw[0]), 1e-5);
}

// dweight sums over rows; its value must not depend on how many threads split the rows.
TEST(RmsNorm, DweightIsBitwiseIndependentOfThreadCount) {
  const Shape shape{301, 131};  // above the parallel threshold, with a partial column block
  Tensor x = random_tensor(shape, DType::kFloat32, 10, -2, 2);
  Tensor w = random_tensor({131}, DType::kFloat32, 11);
  Tensor dy = random_tensor(shape, DType::kFloat32, 12);
  Tensor rstd = run_fwd(x, w).rstd;
  const int saved = omp_get_max_threads();
  Tensor dw[2], dx[2];
  const int threads[2] = {1, 3};
  for (int k = 0; k < 2; ++k) {
    omp_set_num_threads(threads[k]);
    dx[k] = Tensor::empty(shape, DType::kFloat32);
    dw[k] = Tensor::empty({131}, DType::kFloat32);
    rms_norm_bwd(x, w, rstd, dy, dx[k], dw[k]);
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(std::memcmp(dw[0].raw_data(), dw[1].raw_data(), dw[0].nbytes()), 0);
  EXPECT_EQ(std::memcmp(dx[0].raw_data(), dx[1].raw_data(), dx[0].nbytes()), 0);
}

// Gemma's (1 + weight): the reference with the shifted weight, and finite differences through the
// offset (dweight is the same as without it; dx sees 1 + weight).
TEST(RmsNorm, WeightOffsetScalesByOffsetPlusWeight) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const double tol = dtype == DType::kFloat32 ? 1e-5 : 1e-12;
    Tensor x = random_tensor({5, 37}, dtype, 20, -2, 2);
    Tensor w = random_tensor({37}, dtype, 21, -0.5, 0.5);
    Tensor shifted = Tensor::empty({37}, DType::kFloat64);
    for (int64_t i = 0; i < 37; ++i) shifted.data<double>()[i] = 1.0 + w.element_as_double(i);
    Outputs o{Tensor::empty(x.shape(), dtype), Tensor::empty({5}, dtype)};
    rms_norm_fwd(x, w, kEps, o.y, o.rstd, 1.0);
    Tensor y_ref, rstd_ref;
    reference_fwd(x, shifted, y_ref, rstd_ref);
    EXPECT_TRUE(all_close(o.y, y_ref, tol, tol, std::string("y with offset 1, ") + std::string(dtype_name(dtype))));
  }
  Tensor x = random_tensor({3, 5}, DType::kFloat64, 22, -2, 2);
  Tensor w = random_tensor({5}, DType::kFloat64, 23, -0.5, 0.5);
  Tensor probe = random_tensor({3, 5}, DType::kFloat64, 24);
  auto fwd = [&] {
    Outputs o{Tensor::empty(x.shape(), DType::kFloat64), Tensor::empty({3}, DType::kFloat64)};
    rms_norm_fwd(x, w, kEps, o.y, o.rstd, 1.0);
    return o;
  };
  auto loss = [&] { return dot(fwd().y, probe); };
  Tensor dx_num = numeric_gradient(loss, x), dw_num = numeric_gradient(loss, w);
  Tensor dx = Tensor::empty(x.shape(), DType::kFloat64), dw = Tensor::empty({5}, DType::kFloat64);
  rms_norm_bwd(x, w, fwd().rstd, probe, dx, dw, 1.0);
  const double ex = max_relative_error(dx, dx_num), ew = max_relative_error(dw, dw_num);
  EXPECT_LT(ex, 1e-6);
  EXPECT_LT(ew, 1e-6);
  std::cout << "[ rms_norm offset 1 ] max relative error vs finite differences: dx " << ex << ", dweight " << ew
            << "\n";
}

TEST(RmsNorm, BadInputsNameKernelAndTensor) {
  Tensor x = random_tensor({4, 8}, DType::kFloat32, 13);
  Tensor w = random_tensor({8}, DType::kFloat32, 14);
  Tensor y = Tensor::empty({4, 8}, DType::kFloat32);
  Tensor rstd = Tensor::empty({4}, DType::kFloat32);
  using ::testing::AllOf;
  using ::testing::HasSubstr;
  using hspmd::testing::error_of;
  EXPECT_THAT(error_of([&] { rms_norm_fwd(x, random_tensor({7}, DType::kFloat32, 1), kEps, y, rstd); }),
              AllOf(HasSubstr("rms_norm_fwd"), HasSubstr("weight float32[7]")));
  EXPECT_THAT(error_of([&] { rms_norm_fwd(x, random_tensor({8}, DType::kFloat64, 1), kEps, y, rstd); }),
              AllOf(HasSubstr("rms_norm_fwd"), HasSubstr("'weight'"), HasSubstr("dtypes must match")));
  EXPECT_THAT(error_of([&] { rms_norm_fwd(x, w, kEps, y, Tensor::empty({5}, DType::kFloat32)); }),
              AllOf(HasSubstr("rms_norm_fwd"), HasSubstr("rstd float32[5]")));
  EXPECT_THAT(error_of([&] { rms_norm_fwd(Tensor::empty({4, 8}, DType::kInt32), w, kEps, y, rstd); }),
              AllOf(HasSubstr("rms_norm_fwd"), HasSubstr("'x' is int32[4, 8]")));
  EXPECT_THAT(error_of([&] { rms_norm_bwd(x, w, rstd, x, Tensor::empty({4, 9}, DType::kFloat32), w); }),
              AllOf(HasSubstr("rms_norm_bwd"), HasSubstr("dx float32[4, 9]")));
}

}  // namespace
}  // namespace hspmd::kernels
