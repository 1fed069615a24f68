// softmax_fwd against a float64 reference loop, softmax_bwd against central finite differences.
#include "hspmd/kernels/softmax.h"

#include <gmock/gmock.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "hspmd/kernels/threading.h"
#include "kernel_testlib.h"

namespace hspmd::kernels {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using hspmd::testing::all_close;
using hspmd::testing::dot;
using hspmd::testing::max_relative_error;
using hspmd::testing::numeric_gradient;
using hspmd::testing::random_tensor;

Tensor reference_softmax(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), DType::kFloat64);
  const int64_t n = x.dim(-1), rows = n ? x.numel() / n : 0;
  for (int64_t r = 0; r < rows; ++r) {
    double max = -INFINITY, total = 0;
    for (int64_t j = 0; j < n; ++j) max = std::max(max, x.element_as_double(r * n + j));
    for (int64_t j = 0; j < n; ++j) total += std::exp(x.element_as_double(r * n + j) - max);
    for (int64_t j = 0; j < n; ++j) {
      y.data<double>()[r * n + j] = std::exp(x.element_as_double(r * n + j) - max) / total;
    }
  }
  return y;
}

// dx = y * (dy - sum(dy * y)) per row, in float64.
Tensor reference_softmax_bwd(const Tensor& y, const Tensor& dy) {
  Tensor dx = Tensor::empty(y.shape(), DType::kFloat64);
  const int64_t n = y.dim(-1), rows = n ? y.numel() / n : 0;
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t j = 0; j < n; ++j) s += y.element_as_double(r * n + j) * dy.element_as_double(r * n + j);
    for (int64_t j = 0; j < n; ++j) {
      dx.data<double>()[r * n + j] = y.element_as_double(r * n + j) * (dy.element_as_double(r * n + j) - s);
    }
  }
  return dx;
}

TEST(Softmax, MatchesReference) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    double tol = dtype == DType::kFloat64 ? 1e-14 : 1e-6;
    for (const Shape& shape : {Shape{7, 13}, Shape{1, 5, 1}, Shape{3}, Shape{2, 3, 17}, Shape{0, 4}, Shape{4, 0}}) {
      Tensor x = random_tensor(shape, dtype, 1, -5, 5);
      Tensor y = Tensor::empty(shape, dtype);
      softmax_fwd(x, y);
      EXPECT_TRUE(all_close(y, reference_softmax(x), tol, tol, "softmax_fwd " + x.to_string()));

      Tensor dy = random_tensor(shape, dtype, 2);
      Tensor dx = Tensor::empty(shape, dtype);
      softmax_bwd(y, dy, dx);
      EXPECT_TRUE(all_close(dx, reference_softmax_bwd(y, dy), tol, tol, "softmax_bwd " + x.to_string()));
    }
  }
}

TEST(Softmax, StableForLargeLogitsAndMaskedEntries) {
  Tensor x = Tensor::from_vector<float>({2, 3}, {1000.f, 1001.f, 1002.f, -INFINITY, 0.f, -INFINITY});
  Tensor y = Tensor::empty({2, 3}, DType::kFloat32);
  softmax_fwd(x, y);
  const double e1 = std::exp(-1.0), e2 = std::exp(-2.0), total = 1 + e1 + e2;
  Tensor expected = Tensor::from_vector<double>({2, 3}, {e2 / total, e1 / total, 1 / total, 0, 1, 0});
  EXPECT_TRUE(all_close(y, expected, 1e-6, 1e-7, "softmax of large / masked logits"));
}

TEST(Softmax, BackwardMatchesFiniteDifferences) {
  const Shape shape{5, 11};
  Tensor x = random_tensor(shape, DType::kFloat64, 3, -3, 3);
  Tensor w = random_tensor(shape, DType::kFloat64, 4);
  Tensor y = Tensor::empty(shape, DType::kFloat64), dx = Tensor::empty(shape, DType::kFloat64);
  Tensor numeric = numeric_gradient([&] { softmax_fwd(x, y); return dot(y, w); }, x);
  softmax_fwd(x, y);
  softmax_bwd(y, w, dx);
  EXPECT_LT(max_relative_error(dx, numeric), 1e-6);
}

TEST(Softmax, InPlaceAndThreadCountInvariant) {
  Tensor x = random_tensor({300, 301}, DType::kFloat32, 5, -4, 4);
  Tensor one = Tensor::empty(x.shape(), DType::kFloat32), two = x.clone();
  set_num_threads(1);
  softmax_fwd(x, one);
  set_num_threads(2);
  softmax_fwd(two, two);  // in place, on two threads
  set_num_threads(1);
  EXPECT_EQ(std::memcmp(one.raw_data(), two.raw_data(), one.nbytes()), 0);
  Tensor dy = random_tensor(x.shape(), DType::kFloat32, 6), dx = Tensor::empty(x.shape(), DType::kFloat32);
  softmax_bwd(one, dy, dx);
  set_num_threads(2);
  softmax_bwd(one, dy, dy);  // in place over dy
  set_num_threads(1);
  EXPECT_EQ(std::memcmp(dx.raw_data(), dy.raw_data(), dx.nbytes()), 0);
}

TEST(Softmax, RejectsBadTensors) {
  Tensor x = random_tensor({3, 4}, DType::kFloat32, 7);
  EXPECT_THAT([&] { softmax_fwd(x, Tensor::empty({3, 5}, DType::kFloat32)); },
              ThrowsMessage<Error>(HasSubstr("softmax_fwd: 'x' float32[3, 4] and 'y' float32[3, 5] differ in numel")));
  EXPECT_THAT([&] { softmax_bwd(x, x, Tensor::empty({3, 4}, DType::kFloat64)); },
              ThrowsMessage<Error>(HasSubstr("softmax_bwd: 'dx' is float64[3, 4] but 'y' is float32[3, 4]")));
  Tensor scalar = Tensor::full({}, DType::kFloat32, 1.0);
  EXPECT_THAT([&] { softmax_fwd(scalar, scalar); },
              ThrowsMessage<Error>(HasSubstr("softmax_fwd: 'x' float32[] is a scalar")));
  Tensor ints = Tensor::zeros({4}, DType::kInt32);
  EXPECT_THAT([&] { softmax_fwd(ints, ints); },
              ThrowsMessage<Error>(HasSubstr("softmax_fwd: 'x' is int32[4], expected float32 or float64")));
}

}  // namespace
}  // namespace hspmd::kernels
