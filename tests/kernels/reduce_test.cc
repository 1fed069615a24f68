// sum over arbitrary dims against a plain reference loop; whole-tensor sums; identical results on one
// and two threads; errors.
#include "hspmd/kernels/reduce.h"

#include <gmock/gmock.h>

#include <cstring>
#include <string>
#include <vector>

#include "hspmd/kernels/threading.h"
#include "kernel_testlib.h"

namespace hspmd::kernels {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using hspmd::testing::all_close;
using hspmd::testing::random_tensor;

// Walks every element of x, maps its multi-index to the output index over the kept dims, adds in double.
Tensor reference_sum(const Tensor& x, const std::vector<int>& dims) {
  const int rank = x.rank();
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  for (int d : dims) reduced[d < 0 ? d + rank : d] = true;
  std::vector<int64_t> kept_dims;
  for (int d = 0; d < rank; ++d) {
    if (!reduced[d]) kept_dims.push_back(x.dim(d));
  }
  Tensor out = Tensor::zeros(Shape(kept_dims), DType::kFloat64);
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rest = i, o = 0, o_stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      index[d] = rest % x.dim(d);
      rest /= x.dim(d);
    }
    for (int d = rank - 1; d >= 0; --d) {
      if (reduced[d]) continue;
      o += index[d] * o_stride;
      o_stride *= x.dim(d);
    }
    out.data<double>()[o] += x.element_as_double(i);
  }
  return out;
}

struct Case {
  Shape shape;
  std::vector<int> dims;
};

std::string describe(const Case& c, DType dtype) {
  std::string s = std::string(dtype_name(dtype)) + c.shape.to_string() + " over {";
  for (int d : c.dims) s += std::to_string(d) + " ";
  return s + "}";
}

TEST(Sum, MatchesReferenceOverAnyDims) {
  const std::vector<Case> cases = {
      {{7, 13}, {0}},          {{7, 13}, {1}},           {{7, 13}, {-1}},          {{7, 13}, {0, 1}},
      {{7, 13}, {}},           {{2, 3, 4, 5}, {1, 2}},   {{2, 3, 4, 5}, {0, 2}},   {{2, 3, 4, 5}, {0, 3}},
      {{2, 3, 4, 5}, {3, 1}},  {{2, 3, 4, 5}, {0}},      {{2, 3, 4, 5}, {-4, -2}}, {{2, 3, 4, 5}, {0, 1, 2, 3}},
      {{1, 7, 1, 3}, {0}},     {{1, 7, 1, 3}, {2}},      {{1, 7, 1, 3}, {1, 3}},   {{5, 1}, {0}},
      {{}, {}},                {{1}, {0}},               {{1300, 3}, {1}},
      {{3, 4500}, {0}},        {{2, 2, 2100}, {1}},  // rows longer than one accumulation chunk
  };
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Case& c : cases) {
      Tensor x = random_tensor(c.shape, dtype, 1);
      Tensor expected = reference_sum(x, c.dims);
      Tensor out = Tensor::empty(expected.shape(), dtype);
      sum(x, c.dims, out);
      double tol = dtype == DType::kFloat64 ? 1e-13 : 1e-6;
      EXPECT_TRUE(all_close(out, expected, tol, tol, describe(c, dtype)));
    }
  }
}

TEST(Sum, EmptyTensors) {
  // A reduced dim of size 0 gives zeros; a kept dim of size 0 gives an empty output.
  Tensor x = Tensor::empty({0, 4}, DType::kFloat32);
  Tensor out = Tensor::full({4}, DType::kFloat32, 7.0);
  sum(x, {0}, out);
  EXPECT_TRUE(all_close(out, Tensor::zeros({4}, DType::kFloat64), 0, 0, "sum of [0, 4] over dim 0"));
  Tensor y = Tensor::empty({3, 0, 2}, DType::kFloat64);
  Tensor out2 = Tensor::full({3, 2}, DType::kFloat64, 7.0);
  sum(y, {1}, out2);
  EXPECT_TRUE(all_close(out2, Tensor::zeros({3, 2}, DType::kFloat64), 0, 0, "sum of [3, 0, 2] over dim 1"));
  Tensor none = Tensor::empty({0}, DType::kFloat32);
  sum(x, {1}, none);  // nothing to write
  EXPECT_EQ(sum_all(x), 0.0);
  EXPECT_EQ(sum_squares(y), 0.0);
}

TEST(Sum, AllAndSquaresMatchReference) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Shape& shape : {Shape{7, 13}, Shape{1}, Shape{}, Shape{10007}}) {
      Tensor x = random_tensor(shape, dtype, 2);
      double s = 0, sq = 0;
      for (int64_t i = 0; i < x.numel(); ++i) {
        s += x.element_as_double(i);
        sq += x.element_as_double(i) * x.element_as_double(i);
      }
      EXPECT_NEAR(sum_all(x), s, 1e-12 * x.numel()) << x.to_string();
      EXPECT_NEAR(sum_squares(x), sq, 1e-12 * x.numel()) << x.to_string();
    }
  }
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// Every result is accumulated in an order fixed by the shape alone, so the thread count never changes it.
TEST(Sum, SameBitsOnOneAndTwoThreads) {
  const std::vector<Case> cases = {{{300, 257}, {0}}, {{300, 257}, {1}}, {{300, 257}, {0, 1}}, {{16, 4500}, {0}},
                                   {{64, 33, 40}, {0, 2}}, {{64, 33, 40}, {1}}};
  for (const Case& c : cases) {
    Tensor x = random_tensor(c.shape, DType::kFloat32, 3);
    Tensor expected = reference_sum(x, c.dims);
    Tensor one = Tensor::empty(expected.shape(), DType::kFloat32), two = one.clone();
    set_num_threads(1);
    sum(x, c.dims, one);
    double all_one = sum_all(x), squares_one = sum_squares(x);
    set_num_threads(2);
    sum(x, c.dims, two);
    EXPECT_TRUE(bitwise_equal(one, two)) << describe(c, DType::kFloat32);
    EXPECT_EQ(all_one, sum_all(x)) << x.to_string();
    EXPECT_EQ(squares_one, sum_squares(x)) << x.to_string();
    EXPECT_TRUE(all_close(two, expected, 1e-6, 1e-5, describe(c, DType::kFloat32)));
  }
  set_num_threads(1);
}

TEST(Sum, RejectsBadArguments) {
  Tensor x = random_tensor({3, 4}, DType::kFloat32, 4);
  Tensor out = Tensor::empty({4}, DType::kFloat32);
  EXPECT_THAT([&] { sum(x, {2}, out); },
              ThrowsMessage<Error>(HasSubstr("sum: dim 2 of {2} is out of range for 'x' float32[3, 4]")));
  EXPECT_THAT([&] { sum(x, {0, -2}, out); }, ThrowsMessage<Error>(HasSubstr("sum: dim -2 appears twice")));
  EXPECT_THAT([&] { sum(x, {1}, out); },
              ThrowsMessage<Error>(HasSubstr("sum: 'out' float32[4] should have 3 elements")));
  EXPECT_THAT([&] { sum(x, {0}, Tensor::empty({4}, DType::kFloat64)); },
              ThrowsMessage<Error>(HasSubstr("sum: 'out' is float64[4] but 'x' is float32[3, 4]")));
  Tensor ids = Tensor::zeros({3}, DType::kInt32);
  EXPECT_THAT([&] { sum_all(ids); }, ThrowsMessage<Error>(HasSubstr("sum_all: 'x' is int32[3], expected float32")));
}

}  // namespace
}  // namespace hspmd::kernels
