#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "hspmd/core/philox.h"
#include "hspmd/core/random.h"
#include "hspmd/core/tensor.h"

namespace hspmd {
namespace {

TEST(Error, CheckMessageIsTheTextAndOriginKeepsLocationAndCondition) {
  try {
    int tp = 3;
    HSPMD_CHECK(8 % tp == 0) << "hidden 8 not divisible by tp " << tp;
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "hidden 8 not divisible by tp 3");
    EXPECT_NE(e.origin().find("core_test.cc:"), std::string::npos) << e.origin();
    EXPECT_NE(e.origin().find("check failed (8 % tp == 0)"), std::string::npos) << e.origin();
  }
}

TEST(Error, CheckWithoutMessageFallsBackToItsOrigin) {
  try {
    HSPMD_CHECK(1 + 1 == 3);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1 + 1 == 3"), std::string::npos) << e.what();
  }
}

TEST(Error, RethrowWithContextKeepsBothOrigins) {
  try {
    try {
      HSPMD_CHECK(false) << "inner";
    } catch (const Error& e) {
      HSPMD_THROW() << "file.json: " << e.what();
    }
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "file.json: inner");
    EXPECT_NE(e.origin().find(": error, from "), std::string::npos) << e.origin();
    EXPECT_NE(e.origin().find("check failed (false)"), std::string::npos) << e.origin();
  }
}

TEST(Error, InternalErrorKeepsLocationInMessage) {
  try {
    HSPMD_ASSERT(2 < 1) << "offset 2";
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("core_test.cc:"), std::string::npos) << what;
    EXPECT_NE(what.find("internal error (2 < 1): offset 2"), std::string::npos) << what;
  }
}

TEST(Error, PassingCheckDoesNotEvaluateMessage) {
  int evaluated = 0;
  auto side_effect = [&] { return ++evaluated; };
  HSPMD_CHECK(true) << side_effect();
  EXPECT_EQ(evaluated, 0);
}

TEST(DType, SizesNamesAndParse) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt32, DType::kInt64}) {
    EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  }
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::kInt64), 8u);
  EXPECT_THROW(parse_dtype("float16"), Error);
}

TEST(BFloat16, RoundsToNearestEven) {
  // 1 + 2^-8 is exactly half way between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(BFloat16(1.0f + std::ldexp(1.0f, -8)).bits, BFloat16(1.0f).bits);
  // 1 + 3*2^-8 is half way between 1+2^-7 (odd) and 1+2^-6 (even): rounds up to even.
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  // Just above half way rounds up.
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))),
            1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(static_cast<float>(BFloat16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::nanf("")))));
  EXPECT_TRUE(std::isinf(static_cast<float>(BFloat16(INFINITY))));
}

TEST(Shape, DimsAndErrors) {
  Shape s{4, 1, 7};
  EXPECT_EQ(s.numel(), 28);
  EXPECT_EQ(s.dim(-1), 7);
  EXPECT_EQ(s.to_string(), "[4, 1, 7]");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_EQ((Shape{3, 0}).numel(), 0);
  EXPECT_THROW(s.dim(3), Error);
  EXPECT_THROW(Shape({2, -1}), Error);
}

TEST(Tensor, NarrowAndReshapeAreViews) {
  Tensor t = Tensor::from_vector<float>({3, 2}, {0, 1, 2, 3, 4, 5});
  Tensor rows = t.narrow(0, 1, 2);
  EXPECT_TRUE(rows.shares_storage_with(t));
  EXPECT_EQ(rows.to_vector<float>(), (std::vector<float>{2, 3, 4, 5}));
  rows.data<float>()[0] = 42;
  EXPECT_EQ(t.data<float>()[2], 42);

  Tensor r = t.reshape({2, -1});
  EXPECT_EQ(r.shape(), (Shape{2, 3}));
  EXPECT_TRUE(r.shares_storage_with(t));
  // Narrow along an inner dim of a reshaped [1, 6] view is contiguous.
  EXPECT_EQ(t.reshape({1, 6}).narrow(1, 4, 2).to_vector<float>(), (std::vector<float>{4, 5}));
  EXPECT_THROW(t.narrow(1, 0, 1), Error);  // not contiguous
  EXPECT_THROW(t.narrow(0, 2, 2), Error);  // out of range
  EXPECT_THROW(t.reshape({4, 2}), Error);
  EXPECT_THROW(t.data<double>(), Error);
}

TEST(Tensor, CloneCopyFillAndEmpty) {
  Tensor t = Tensor::full({2, 2}, DType::kBFloat16, 1.5);
  Tensor c = t.clone();
  EXPECT_FALSE(c.shares_storage_with(t));
  EXPECT_EQ(c.element_as_double(3), 1.5);
  Tensor e = Tensor::zeros({0, 5}, DType::kFloat32);
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.clone().numel(), 0);
}

TEST(Philox, DeterministicAndShardable) {
  Tensor whole = Tensor::empty({10}, DType::kFloat64);
  fill_normal(whole, 7, 0.0, 1.0, /*stream=*/3);
  Tensor part = Tensor::empty({4}, DType::kFloat64);
  fill_normal(part, 7, 0.0, 1.0, 3, /*offset=*/6);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(part.element_as_double(i), whole.element_as_double(6 + i));
  EXPECT_NE(philox_uniform(1, 0, 0), philox_uniform(2, 0, 0));
  // Moments of many normals are close to (0, 1).
  double sum = 0, sq = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    double v = philox_normal(11, 0, i);
    sum += v;
    sq += v * v;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.03);
  EXPECT_NEAR(sq / n, 1.0, 0.05);
}

}  // namespace
}  // namespace hspmd
