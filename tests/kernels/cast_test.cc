// cast between every pair of dtypes against a reference conversion; single rounding of float64 to
// bfloat16; range errors for integer destinations.
#include "hspmd/kernels/cast.h"

#include <gmock/gmock.h>

#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "hspmd/kernels/threading.h"
#include "kernel_testlib.h"

namespace hspmd::kernels {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using hspmd::testing::all_close;
using hspmd::testing::random_ints;
using hspmd::testing::random_tensor;

const std::vector<DType> kDTypes = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt32,
                                    DType::kInt64};

double bf16_value(uint16_t bits) { return static_cast<float>(std::bit_cast<BFloat16>(bits)); }

// The bfloat16 nearest to v (ties to even), by comparing v with its neighbours in double: an
// oracle that does not share the kernel's round-to-odd trick. Finite v within bfloat16's range.
uint16_t reference_bf16_bits(double v) {
  uint16_t truncated = static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(v)) >> 16);
  uint16_t best = truncated;
  for (int delta : {-1, 1}) {
    uint16_t candidate = static_cast<uint16_t>(truncated + delta);
    double dc = std::abs(bf16_value(candidate) - v), db = std::abs(bf16_value(best) - v);
    if (dc < db || (dc == db && (candidate & 1) == 0)) best = candidate;
  }
  return best;
}

// Source values that fit every destination: floats in [-1000, 1000], ints in [-100000, 100000).
Tensor source(const Shape& shape, DType dtype, uint64_t seed) {
  if (is_floating(dtype)) return random_tensor(shape, dtype, seed, -1000, 1000);
  return random_ints(shape, dtype, seed, -100000, 100000);
}

double reference_convert(double v, DType to) {
  switch (to) {
    case DType::kFloat32: return static_cast<float>(v);
    case DType::kFloat64: return v;
    case DType::kBFloat16: return bf16_value(reference_bf16_bits(v));
    case DType::kInt32:
    case DType::kInt64: return std::trunc(v);
  }
  return 0;
}

TEST(Cast, EveryPairMatchesReference) {
  for (const Shape& shape : {Shape{7, 13}, Shape{1, 5, 1}, Shape{}, Shape{0, 3}}) {
    for (DType from : kDTypes) {
      Tensor x = source(shape, from, 1);
      for (DType to : kDTypes) {
        Tensor out = Tensor::empty(shape, to);
        cast(x, out);
        Tensor expected = Tensor::empty(shape, DType::kFloat64);
        for (int64_t i = 0; i < x.numel(); ++i) {
          expected.data<double>()[i] = reference_convert(x.element_as_double(i), to);
        }
        EXPECT_TRUE(all_close(out, expected, 0, 0,
                              std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)) +
                                  shape.to_string()));
      }
    }
  }
}

TEST(Cast, RoundsToNearestEvenOnce) {
  const double tie = 1 + std::ldexp(1.0, -8);  // halfway between bfloat16 1 and 1 + 2^-7
  const std::vector<std::pair<double, uint16_t>> cases = {
      {tie, 0x3F80},                                    // tie: to even (down)
      {1 + 3 * std::ldexp(1.0, -8), 0x3F82},            // tie: to even (up)
      {tie + std::ldexp(1.0, -30), 0x3F81},             // just above the tie: up (rounding via float gives 0x3F80)
      {tie - std::ldexp(1.0, -30), 0x3F80},             // just below the tie: down (via float: the tie itself)
      {-(tie + std::ldexp(1.0, -30)), 0xBF81},
      {-0.0, 0x8000},
      {1e300, 0x7F80},                                  // overflows to infinity
      {-std::numeric_limits<double>::infinity(), 0xFF80},
      {1e-300, 0x0000},                                 // underflows to zero
  };
  Tensor x = Tensor::empty({static_cast<int64_t>(cases.size())}, DType::kFloat64);
  for (size_t i = 0; i < cases.size(); ++i) x.data<double>()[i] = cases[i].first;
  Tensor out = Tensor::empty(x.shape(), DType::kBFloat16);
  cast(x, out);
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(out.data<BFloat16>()[i].bits, cases[i].second) << "float64 " << cases[i].first;
  }
  // float32 -> bfloat16 agrees with BFloat16's own rounding; NaN stays NaN.
  Tensor f = Tensor::from_vector<float>({3}, {static_cast<float>(tie), 1.5f, std::nanf("")});
  Tensor fb = Tensor::empty({3}, DType::kBFloat16);
  cast(f, fb);
  EXPECT_EQ(fb.data<BFloat16>()[0].bits, 0x3F80);
  EXPECT_EQ(fb.data<BFloat16>()[1].bits, 0x3FC0);
  EXPECT_TRUE(std::isnan(fb.element_as_double(2)));
}

TEST(Cast, FloatingToIntegerTruncatesTowardZero) {
  Tensor x = Tensor::from_vector<double>({6}, {2.7, -2.7, 0.5, -0.5, 2147483647.9, -2147483648.9});
  Tensor out = Tensor::empty({6}, DType::kInt32);
  cast(x, out);
  EXPECT_EQ(out.to_vector<int32_t>(), (std::vector<int32_t>{2, -2, 0, 0, 2147483647, -2147483647 - 1}));
  Tensor big = Tensor::from_vector<int64_t>({2}, {int64_t{1} << 40, -(int64_t{1} << 40) - 1});
  Tensor big64 = Tensor::empty({2}, DType::kFloat64);
  cast(big, big64);
  EXPECT_EQ(big64.to_vector<double>(), (std::vector<double>{1099511627776.0, -1099511627777.0}));
}

TEST(Cast, LargeTensorOnTwoThreads) {
  set_num_threads(2);
  Tensor x = random_tensor({70001}, DType::kFloat32, 2, -5, 5);
  Tensor out = Tensor::empty(x.shape(), DType::kBFloat16);
  cast(x, out);
  for (int64_t i = 0; i < x.numel(); ++i) {
    ASSERT_EQ(out.data<BFloat16>()[i].bits, BFloat16(x.data<float>()[i]).bits) << "element " << i;
  }
  set_num_threads(1);
}

TEST(Cast, RejectsValuesThatDoNotFitAndMismatchedNumel) {
  Tensor x = Tensor::from_vector<int64_t>({3}, {1, int64_t{3000000000}, 2});
  EXPECT_THAT([&] { cast(x, Tensor::empty({3}, DType::kInt32)); },
              ThrowsMessage<Error>(HasSubstr("cast: element 1 of 'x' int64[3] (3e+09) does not fit in int32")));
  Tensor nan = Tensor::from_vector<float>({2}, {1.0f, std::nanf("")});
  EXPECT_THAT([&] { cast(nan, Tensor::empty({2}, DType::kInt64)); },
              ThrowsMessage<Error>(HasSubstr("cast: element 1 of 'x' float32[2] (nan) does not fit in int64")));
  Tensor huge = Tensor::from_vector<double>({1}, {2147483648.0});
  EXPECT_THAT([&] { cast(huge, Tensor::empty({1}, DType::kInt32)); },
              ThrowsMessage<Error>(HasSubstr("does not fit in int32")));
  EXPECT_THAT([&] { cast(x, Tensor::empty({4}, DType::kFloat32)); },
              ThrowsMessage<Error>(HasSubstr("cast: 'x' int64[3] and 'out' float32[4] differ in numel")));
}

}  // namespace
}  // namespace hspmd::kernels
