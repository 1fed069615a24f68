#include "hspmd/kernels/rope.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernel_testlib.h"

namespace hspmd::kernels {
namespace {

using hspmd::testing::all_close;
using hspmd::testing::dot;
using hspmd::testing::max_relative_error;
using hspmd::testing::numeric_gradient;
using hspmd::testing::random_ints;
using hspmd::testing::random_tensor;

// Plain double loop of the rotate-half formula in rope.h.
Tensor reference_rope(const Tensor& x, const Tensor& positions, double theta) {
  const int64_t tokens = x.dim(0), heads = x.dim(1), d = x.dim(2), half = d / 2;
  Tensor y = Tensor::empty(x.shape(), DType::kFloat64);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t base = (t * heads + h) * d;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = positions.element_as_double(t) * std::pow(theta, -2.0 * i / d);
        const double a = x.element_as_double(base + i), b = x.element_as_double(base + i + half);
        y.data<double>()[base + i] = a * std::cos(angle) - b * std::sin(angle);
        y.data<double>()[base + i + half] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
  }
  return y;
}

Tensor fwd(const Tensor& x, const Tensor& positions, double theta) {
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  rope_fwd(x, positions, theta, y);
  return y;
}

Tensor bwd(const Tensor& dy, const Tensor& positions, double theta) {
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype());
  rope_bwd(dy, positions, theta, dx);
  return dx;
}

TEST(Rope, ForwardMatchesReference) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (DType pos_dtype : {DType::kInt32, DType::kInt64}) {
      for (const Shape& shape : {Shape{5, 3, 8}, Shape{1, 1, 2}, Shape{7, 2, 6}}) {
        for (double theta : {10000.0, 500000.0}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::string(dtype_name(pos_dtype)) + " " +
                       shape.to_string() + " theta " + std::to_string(theta));
          Tensor x = random_tensor(shape, dtype, 1);
          // Positions up to 1e5: an angle computed in float32 would be off by ~1e-2 rad there.
          Tensor positions = random_ints({shape.dim(0)}, pos_dtype, 2, 0, 100000);
          const double tol = dtype == DType::kFloat32 ? 2e-6 : 1e-12;
          EXPECT_TRUE(all_close(fwd(x, positions, theta), reference_rope(x, positions, theta), tol, tol, "y"));
        }
      }
    }
  }
}

TEST(Rope, HandComputedHeadDim4) {
  // D = 4, theta = 1e4: inv_freq = [1e4^0, 1e4^(-2/4)] = [1, 0.01]; at position 1 the angles are
  // 1 and 0.01 rad. With x = [1, 2, 3, 4] (pairs (x0, x2) and (x1, x3)):
  //   y0 = 1 cos(1) - 3 sin(1)       = 0.5403023058681398 - 3 * 0.8414709848078965
  //   y1 = 2 cos(.01) - 4 sin(.01)   = 2 * 0.9999500004166653 - 4 * 0.009999833334166664
  //   y2 = 3 cos(1) + 1 sin(1)
  //   y3 = 4 cos(.01) + 2 sin(.01)
  Tensor x = Tensor::from_vector<double>({2, 1, 4}, {1, 2, 3, 4, 1, 2, 3, 4});
  Tensor positions = Tensor::from_vector<int64_t>({2}, {0, 1});
  Tensor expected = Tensor::from_vector<double>(
      {2, 1, 4}, {1, 2, 3, 4, -1.9841106485555495, 1.959900667496664, 2.4623779024123156, 4.019799668334994});
  EXPECT_TRUE(all_close(fwd(x, positions, 10000.0), expected, 1e-15, 1e-15, "D=4"));
}

// A packed batch whose positions restart at 0 per sequence rotates each token exactly as the
// sequence would be rotated alone.
TEST(Rope, PackedSequencesRestartingAtZeroMatchEachSequenceAlone) {
  const std::vector<int64_t> lengths = {3, 5, 1};
  std::vector<int64_t> packed_positions;
  for (int64_t n : lengths) {
    for (int64_t p = 0; p < n; ++p) packed_positions.push_back(p);
  }
  const auto total = static_cast<int64_t>(packed_positions.size());
  Tensor x = random_tensor({total, 2, 6}, DType::kFloat32, 3);
  Tensor y = fwd(x, Tensor::from_vector<int64_t>({total}, packed_positions), 500000.0);
  int64_t start = 0;
  for (int64_t n : lengths) {
    std::vector<int32_t> alone_positions(n);
    for (int64_t p = 0; p < n; ++p) alone_positions[p] = static_cast<int32_t>(p);
    Tensor x_alone = Tensor::empty({n, 2, 6}, DType::kFloat32);
    std::memcpy(x_alone.raw_data(), x.data<float>() + start * 12, x_alone.nbytes());
    Tensor y_alone = fwd(x_alone, Tensor::from_vector<int32_t>({n}, alone_positions), 500000.0);
    EXPECT_EQ(std::memcmp(y_alone.raw_data(), y.data<float>() + start * 12, y_alone.nbytes()), 0)
        << "sequence at token " << start;
    start += n;
  }
}

// Dense positions take their angles from one table over [min, max], scattered ones are computed
// per token; both give every token the same bits.
TEST(Rope, PositionTableEqualsPerTokenAngles) {
  const std::vector<int64_t> dense = {7, 9, 8, 7, 9};  // spread 2 < 5 tokens: the table
  Tensor x = random_tensor({5, 3, 8}, DType::kFloat32, 11);
  for (const bool backward : {false, true}) {
    Tensor packed = Tensor::from_vector<int64_t>({5}, dense);
    Tensor y = backward ? bwd(x, packed, 10000.0) : fwd(x, packed, 10000.0);
    for (int64_t t = 0; t < 5; ++t) {
      // Token t next to a far position: spread 10^6 >= 2 tokens, the per-token path.
      Tensor pair = Tensor::zeros({2, 3, 8}, DType::kFloat32);
      std::memcpy(pair.raw_data(), x.data<float>() + t * 24, 24 * sizeof(float));
      Tensor far = Tensor::from_vector<int64_t>({2}, {dense[t], dense[t] + 1000000});
      Tensor y_pair = backward ? bwd(pair, far, 10000.0) : fwd(pair, far, 10000.0);
      EXPECT_EQ(std::memcmp(y_pair.raw_data(), y.data<float>() + t * 24, 24 * sizeof(float)), 0)
          << (backward ? "backward" : "forward") << ", token " << t;
    }
  }
}

TEST(Rope, BackwardOfForwardIsIdentity) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    Tensor x = random_tensor({6, 3, 10}, dtype, 4);
    Tensor positions = random_ints({6}, DType::kInt64, 5, 0, 4096);
    const double tol = dtype == DType::kFloat32 ? 1e-6 : 1e-14;
    EXPECT_TRUE(all_close(bwd(fwd(x, positions, 10000.0), positions, 10000.0), x, tol, tol,
                          std::string(dtype_name(dtype))));
  }
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  Tensor x = random_tensor({4, 2, 6}, DType::kFloat64, 6);
  Tensor positions = random_ints({4}, DType::kInt32, 7, 0, 50);
  Tensor probe = random_tensor({4, 2, 6}, DType::kFloat64, 8);
  Tensor dx_num = numeric_gradient([&] { return dot(fwd(x, positions, 10000.0), probe); }, x);
  EXPECT_LT(max_relative_error(bwd(probe, positions, 10000.0), dx_num), 1e-6);
}

TEST(Rope, InPlaceMatchesOutOfPlace) {
  Tensor x = random_tensor({3, 2, 8}, DType::kFloat64, 9);
  Tensor positions = random_ints({3}, DType::kInt64, 10, 0, 100);
  Tensor expected = fwd(x, positions, 10000.0);
  rope_fwd(x, positions, 10000.0, x);
  EXPECT_TRUE(all_close(x, expected, 0, 0, "in place"));
}

TEST(Rope, EmptyTokens) {
  Tensor x = Tensor::empty({0, 4, 8}, DType::kFloat32);
  EXPECT_EQ(fwd(x, Tensor::empty({0}, DType::kInt64), 10000.0).numel(), 0);
  EXPECT_EQ(bwd(x, Tensor::empty({0}, DType::kInt32), 10000.0).numel(), 0);
}

TEST(Rope, BadInputsNameKernelAndTensor) {
  using ::testing::AllOf;
  using ::testing::HasSubstr;
  using hspmd::testing::error_of;
  Tensor x = random_tensor({3, 2, 8}, DType::kFloat32, 11);
  Tensor positions = random_ints({3}, DType::kInt64, 12, 0, 10);
  EXPECT_THAT(error_of([&] { fwd(random_tensor({3, 2, 7}, DType::kFloat32, 1), positions, 1e4); }),
              AllOf(HasSubstr("rope_fwd"), HasSubstr("must be even")));
  EXPECT_THAT(error_of([&] { fwd(x, random_ints({4}, DType::kInt64, 1, 0, 9), 1e4); }),
              AllOf(HasSubstr("rope_fwd"), HasSubstr("positions int64[4]")));
  EXPECT_THAT(error_of([&] { fwd(x, Tensor::empty({3}, DType::kFloat32), 1e4); }),
              AllOf(HasSubstr("rope_fwd"), HasSubstr("'positions' is float32[3]")));
  EXPECT_THAT(error_of([&] { bwd(x, positions, 0.0); }), AllOf(HasSubstr("rope_bwd"), HasSubstr("theta 0")));
  EXPECT_THAT(error_of([&] { rope_fwd(x, positions, 1e4, Tensor::empty({3, 2, 8}, DType::kFloat64)); }),
              AllOf(HasSubstr("rope_fwd"), HasSubstr("'y' is float64[3, 2, 8]")));
}

}  // namespace
}  // namespace hspmd::kernels
