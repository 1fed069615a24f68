// bf16 mixed precision in the kernels: round_to_bfloat16 against core/bfloat16.h's conversion
// (ties, NaN, infinities, overflow), and matmul / attention with bf16_operands
//   - equal to the float32 kernel on operands rounded beforehand (the rounding is the only change),
//   - within bf16 tolerance of the float64 kernel on the unrounded operands (the rounding is small),
//   - measurably different from float32 (the option does something).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "hspmd/core/bfloat16.h"
#include "hspmd/kernels/attention.h"
#include "hspmd/kernels/bf16_rounding.h"
#include "hspmd/kernels/cast.h"
#include "hspmd/kernels/gemm_backend.h"
#include "hspmd/kernels/matmul.h"
#include "kernel_testlib.h"

namespace hspmd::kernels {
namespace {

using hspmd::testing::all_close;
using hspmd::testing::max_relative_error;
using hspmd::testing::random_tensor;

Tensor rounded(const Tensor& x) {
  Tensor r = Tensor::empty(x.shape(), DType::kFloat32);
  round_to_bfloat16(x, r);
  return r;
}

Tensor to(const Tensor& x, DType dtype) {
  Tensor r = Tensor::empty(x.shape(), dtype);
  cast(x, r);
  return r;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST(RoundToBfloat16, MatchesTheScalarConversionOnEdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values = {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                               std::bit_cast<float>(0x7f800001u)};  // a signalling NaN
  // Ties: exactly half a bf16 ulp above 1 (rounds down to even) and above 1 + 2^-7 (rounds up to even).
  values.push_back(1.0f + 0x1p-8f);
  values.push_back(1.0f + 0x1p-7f + 0x1p-8f);
  values.push_back(1.0f + 0x1p-8f + 0x1p-20f);  // just above a tie
  for (uint32_t bits = 0x3f800000u; bits < 0x3f800000u + 70000u; bits += 7) values.push_back(std::bit_cast<float>(bits));
  Tensor x = Tensor::from_vector(Shape{static_cast<int64_t>(values.size())}, values);
  Tensor r = rounded(x);
  for (size_t i = 0; i < values.size(); ++i) {
    const float expected = static_cast<float>(BFloat16(values[i]));
    const float got = r.data<float>()[i];
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got)) << "value " << values[i];
      EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(expected)) << "NaN payload of element " << i;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(expected)) << "value " << values[i];
    }
  }
}

TEST(RoundToBfloat16, InPlaceAndLargeTensorsAgreeWithTheCopy) {
  Tensor x = random_tensor({300, 700}, DType::kFloat32, 11, -5, 5);  // above the threading threshold
  Tensor copy = rounded(x);
  Tensor in_place = x.clone();
  round_to_bfloat16(in_place, in_place);
  EXPECT_TRUE(bitwise_equal(in_place, copy));
  EXPECT_TRUE(bitwise_equal(copy, to(to(x, DType::kBFloat16), DType::kFloat32)));
  EXPECT_FALSE(bitwise_equal(copy, x));
}

TEST(RoundToBfloat16, RejectsOtherDtypes) {
  Tensor d = Tensor::zeros({3}, DType::kFloat64);
  EXPECT_THAT(hspmd::testing::error_of([&] { round_to_bfloat16(d, d); }),
              ::testing::HasSubstr("must be float32 of one shape"));
}

struct MatmulCase {
  int64_t m, n, k;
  bool trans_a, trans_b;
};

// Each bf16 GEMM (hspmd::testing::EachBf16Gemm).
class MatmulBf16Operands : public hspmd::testing::EachBf16Gemm {
 protected:
  // The float32 GEMM of the rounded operands computes the same exact products: the rounded-operand
  // path is that very computation (bitwise), oneDNN's adds them in its own order (float32 error).
  void expect_product_of_rounded(const Tensor& got, const Tensor& ref, const std::string& what) const {
    if (GetParam() == Bf16Gemm::kFloat32) {
      EXPECT_TRUE(bitwise_equal(got, ref)) << what;
    } else {
      EXPECT_LT(max_relative_error(to(got, DType::kFloat64), to(ref, DType::kFloat64)), 1e-5) << what;
    }
  }
};

INSTANTIATE_TEST_SUITE_P(Gemms, MatmulBf16Operands, hspmd::testing::each_bf16_gemm(),
                         hspmd::testing::bf16_gemm_test_name);

TEST_P(MatmulBf16Operands, IsTheFloat32ProductOfRoundedOperands) {
  for (const MatmulCase& c : {MatmulCase{33, 17, 129, false, true}, MatmulCase{64, 48, 256, true, false},
                              MatmulCase{8, 300, 40, true, true}, MatmulCase{100, 64, 64, false, false}}) {
    Tensor a = random_tensor(c.trans_a ? Shape{c.k, c.m} : Shape{c.m, c.k}, DType::kFloat32, 1);
    Tensor b = random_tensor(c.trans_b ? Shape{c.n, c.k} : Shape{c.k, c.n}, DType::kFloat32, 2);
    Tensor bf16 = Tensor::empty({c.m, c.n}, DType::kFloat32), ref = Tensor::empty({c.m, c.n}, DType::kFloat32);
    matmul(a, b, bf16, {.trans_a = c.trans_a, .trans_b = c.trans_b, .bf16_operands = true});
    matmul(rounded(a), rounded(b), ref, {.trans_a = c.trans_a, .trans_b = c.trans_b});
    const std::string what = std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k);
    expect_product_of_rounded(bf16, ref, what);

    // Against float64 on the unrounded operands: each operand is off by at most 2^-9 relative, so
    // the sum of K products of uniform [-1, 1) values is off by a few 2^-9 * sqrt(K) in the worst
    // element relative to the largest.
    Tensor exact = Tensor::empty({c.m, c.n}, DType::kFloat64), fp32 = Tensor::empty({c.m, c.n}, DType::kFloat32);
    matmul(to(a, DType::kFloat64), to(b, DType::kFloat64), exact, {.trans_a = c.trans_a, .trans_b = c.trans_b});
    matmul(a, b, fp32, {.trans_a = c.trans_a, .trans_b = c.trans_b});
    const double err_bf16 = max_relative_error(to(bf16, DType::kFloat64), exact);
    const double err_fp32 = max_relative_error(to(fp32, DType::kFloat64), exact);
    EXPECT_LT(err_bf16, 1.5e-2) << "bf16 operands, " << what;
    EXPECT_GT(err_bf16, 10 * err_fp32) << "bf16 rounding must show beside float32's";
  }
}

TEST_P(MatmulBf16Operands, BatchedAndAccumulating) {
  Tensor a = random_tensor({3, 20, 30}, DType::kFloat32, 5), b = random_tensor({30, 12}, DType::kFloat32, 6);
  Tensor out = random_tensor({3, 20, 12}, DType::kFloat32, 7), ref = out.clone();
  matmul(a, b, out, {.beta = 1.0, .bf16_operands = true});
  matmul(rounded(a), rounded(b), ref, {.beta = 1.0});
  expect_product_of_rounded(out, ref, "batched, beta 1");
  // Per-batch GEMMs (b not shared) with alpha and beta other than 1.
  Tensor bb = random_tensor({3, 30, 12}, DType::kFloat32, 8);
  Tensor out2 = random_tensor({3, 20, 12}, DType::kFloat32, 9), ref2 = out2.clone();
  matmul(a, bb, out2, {.alpha = 0.5, .beta = 2.0, .bf16_operands = true});
  matmul(rounded(a), rounded(bb), ref2, {.alpha = 0.5, .beta = 2.0});
  expect_product_of_rounded(out2, ref2, "per batch, alpha 0.5, beta 2");
}

TEST(MatmulBf16Operands, NeedsFloat32) {
  Tensor a = Tensor::zeros({2, 2}, DType::kFloat64), out = Tensor::zeros({2, 2}, DType::kFloat64);
  EXPECT_THAT(hspmd::testing::error_of([&] { matmul(a, a, out, {.bf16_operands = true}); }),
              ::testing::HasSubstr("bf16 operands are rounded from float32 inputs, got float64"));
}

struct AttentionProblem {
  Tensor q, k, v, cu;
};

AttentionProblem attention_problem(DType dtype) {
  // Two packed sequences crossing the 64-token tile, 4 query heads over 2 kv heads, D 16.
  Tensor cu = Tensor::from_vector(Shape{3}, std::vector<int64_t>{0, 70, 100});
  return {random_tensor({100, 4, 16}, dtype, 21, -2, 2), random_tensor({100, 2, 16}, dtype, 22, -2, 2),
          random_tensor({100, 2, 16}, dtype, 23), cu};
}

struct AttentionResult {
  Tensor out, lse, dq, dk, dv;
};

AttentionResult run_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu, const Tensor& dout,
                              bool bf16) {
  AttentionResult r{Tensor::empty(q.shape(), q.dtype()), Tensor::empty({q.dim(1), q.dim(0)}, q.dtype()),
                    Tensor::empty(q.shape(), q.dtype()), Tensor::empty(k.shape(), q.dtype()),
                    Tensor::empty(k.shape(), q.dtype())};
  attention_fwd(q, k, v, cu, r.out, r.lse, {.bf16_operands = bf16});
  attention_bwd(q, k, v, cu, r.out, r.lse, dout, r.dq, r.dk, r.dv, {.bf16_operands = bf16});
  return r;
}

TEST(AttentionBf16Operands, IsFloat32AttentionOfRoundedOperands) {
  AttentionProblem p = attention_problem(DType::kFloat32);
  Tensor dout = random_tensor(p.q.shape(), DType::kFloat32, 24);
  AttentionResult bf16 = run_attention(p.q, p.k, p.v, p.cu, dout, true);
  // The reference rounds the same operands beforehand; its backward reads the forward output
  // computed from them, as the kernel's does.
  AttentionResult ref = run_attention(rounded(p.q), rounded(p.k), rounded(p.v), p.cu, rounded(dout), false);
  EXPECT_TRUE(bitwise_equal(bf16.out, ref.out));
  EXPECT_TRUE(bitwise_equal(bf16.lse, ref.lse));
  // Delta = rowsum(dO * O) reads the float32 output in both, but the reference's dO is rounded
  // and its O is the same: the gradients agree bit for bit too.
  EXPECT_TRUE(bitwise_equal(bf16.dq, ref.dq));
  EXPECT_TRUE(bitwise_equal(bf16.dk, ref.dk));
  EXPECT_TRUE(bitwise_equal(bf16.dv, ref.dv));
}

TEST(AttentionBf16Operands, WithinBf16ToleranceOfFloat64) {
  AttentionProblem p = attention_problem(DType::kFloat32);
  Tensor dout = random_tensor(p.q.shape(), DType::kFloat32, 24);
  AttentionResult bf16 = run_attention(p.q, p.k, p.v, p.cu, dout, true);
  AttentionResult fp32 = run_attention(p.q, p.k, p.v, p.cu, dout, false);
  AttentionResult exact = run_attention(to(p.q, DType::kFloat64), to(p.k, DType::kFloat64), to(p.v, DType::kFloat64),
                                        p.cu, to(dout, DType::kFloat64), false);
  const std::vector<std::pair<const char*, std::pair<Tensor, Tensor>>> outputs = {
      {"out", {bf16.out, exact.out}}, {"dq", {bf16.dq, exact.dq}}, {"dk", {bf16.dk, exact.dk}},
      {"dv", {bf16.dv, exact.dv}}};
  for (const auto& [name, pair] : outputs) {
    // Scores of a few units: an operand error of 2^-9 moves a logit by ~1e-2 at most.
    EXPECT_LT(max_relative_error(to(pair.first, DType::kFloat64), pair.second), 3e-2) << name;
  }
  EXPECT_GT(max_relative_error(to(bf16.out, DType::kFloat64), exact.out),
            10 * max_relative_error(to(fp32.out, DType::kFloat64), exact.out));
}

TEST(AttentionBf16Operands, NeedsFloat32) {
  AttentionProblem p = attention_problem(DType::kFloat64);
  Tensor out = Tensor::empty(p.q.shape(), DType::kFloat64), lse = Tensor::empty({4, 100}, DType::kFloat64);
  EXPECT_THAT(hspmd::testing::error_of([&] { attention_fwd(p.q, p.k, p.v, p.cu, out, lse, {.bf16_operands = true}); }),
              ::testing::HasSubstr("bf16 operands are rounded from float32 inputs"));
}

}  // namespace
}  // namespace hspmd::kernels
