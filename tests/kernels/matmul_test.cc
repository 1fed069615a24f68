// matmul against a plain triple loop in double: every transpose combination, batched and shared-b,
// alpha/beta, odd, size-1 and empty sizes, float32/float64/bfloat16, and the shape errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "hspmd/kernels/matmul.h"
#include "kernel_testlib.h"

namespace hspmd::kernels {
namespace {

using hspmd::testing::all_close;
using hspmd::testing::random_tensor;

// alpha * op(a) @ op(b) + beta * out0 in float64, element by element.
Tensor reference_matmul(const Tensor& a, const Tensor& b, const Tensor& out0, const MatmulOptions& o) {
  const int64_t m = o.trans_a ? a.dim(-1) : a.dim(-2), k = o.trans_a ? a.dim(-2) : a.dim(-1);
  const int64_t n = o.trans_b ? b.dim(-2) : b.dim(-1);
  const int64_t batches = m * n == 0 ? 0 : out0.numel() / (m * n);
  const bool shared = b.rank() == 2 && a.rank() > 2;
  Tensor r = Tensor::empty(out0.shape(), DType::kFloat64);
  for (int64_t t = 0; t < batches; ++t) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) {
          double x = a.element_as_double(t * m * k + (o.trans_a ? p * m + i : i * k + p));
          double y = b.element_as_double((shared ? 0 : t * k * n) + (o.trans_b ? j * k + p : p * n + j));
          s += x * y;
        }
        const int64_t c = t * m * n + i * n + j;
        r.data<double>()[c] = o.alpha * s + (o.beta == 0.0 ? 0.0 : o.beta * out0.element_as_double(c));
      }
    }
  }
  return r;
}

// Shapes of a, b, out for op(a)[lead, m, k] @ op(b)[(lead), k, n].
struct Case {
  std::vector<int64_t> lead;
  int64_t m, n, k;
  bool b_shared = false;
};

std::vector<int64_t> with(std::vector<int64_t> lead, int64_t r, int64_t c) {
  lead.push_back(r);
  lead.push_back(c);
  return lead;
}

double tolerance(DType dtype) {
  return dtype == DType::kFloat64 ? 1e-12 : dtype == DType::kFloat32 ? 2e-6 : 1.0 / 128;
}

// Runs one case with random a, b and a random initial out; checks against the reference.
void check_case(const Case& c, DType dtype, const MatmulOptions& o, uint64_t seed) {
  Shape sa(o.trans_a ? with(c.lead, c.k, c.m) : with(c.lead, c.m, c.k));
  std::vector<int64_t> lead_b = c.b_shared ? std::vector<int64_t>{} : c.lead;
  Shape sb(o.trans_b ? with(lead_b, c.n, c.k) : with(lead_b, c.k, c.n));
  Tensor a = random_tensor(sa, dtype, seed), b = random_tensor(sb, dtype, seed + 1);
  Tensor out = random_tensor(Shape(with(c.lead, c.m, c.n)), dtype, seed + 2);
  Tensor expected = reference_matmul(a, b, out, o);
  matmul(a, b, out, o);
  const double tol = tolerance(dtype);
  EXPECT_TRUE(all_close(out, expected, tol, tol * std::max<int64_t>(1, c.k),
                        "matmul " + sa.to_string() + (o.trans_a ? "^T" : "") + " x " + sb.to_string() +
                            (o.trans_b ? "^T" : "") + " " + std::string(dtype_name(dtype))));
}

const DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16};

TEST(Matmul, AllTransposeCombinationsOddSizes) {
  for (DType dtype : kDTypes) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) check_case({{}, 7, 13, 5}, dtype, {.trans_a = ta, .trans_b = tb}, 1);
    }
  }
}

TEST(Matmul, AlphaAndBetaAccumulate) {
  for (DType dtype : kDTypes) {
    check_case({{}, 9, 4, 11}, dtype, {.alpha = 1.5, .beta = -0.75}, 2);
    check_case({{}, 9, 4, 11}, dtype, {.trans_b = true, .alpha = -2.0, .beta = 1.0}, 3);
  }
}

TEST(Matmul, BatchedSameLeadingDims) {
  for (DType dtype : kDTypes) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        check_case({{2, 3}, 6, 5, 7}, dtype, {.trans_a = ta, .trans_b = tb, .beta = 0.5}, 4);
      }
    }
  }
}

TEST(Matmul, SharedTwoDimB) {
  // !trans_a folds the batch into M (one GEMM); trans_a loops over batches.
  for (DType dtype : kDTypes) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        check_case({{3}, 5, 4, 6, true}, dtype, {.trans_a = ta, .trans_b = tb, .beta = 0.25}, 5);
        check_case({{2, 2}, 3, 8, 2, true}, dtype, {.trans_a = ta, .trans_b = tb}, 6);
      }
    }
  }
}

TEST(Matmul, SizeOneDims) {
  for (DType dtype : kDTypes) {
    check_case({{}, 1, 1, 1}, dtype, {}, 7);
    check_case({{}, 1, 9, 1}, dtype, {.trans_b = true}, 8);
    check_case({{1}, 9, 1, 3}, dtype, {.trans_a = true}, 9);
    check_case({{4}, 1, 3, 2, true}, dtype, {}, 10);
  }
}

TEST(Matmul, LargerThanOneBlasBlock) {
  check_case({{}, 65, 130, 257}, DType::kFloat32, {.trans_b = true}, 11);
  check_case({{2}, 70, 33, 129}, DType::kFloat64, {.trans_a = true, .beta = 1.0}, 12);
}

TEST(Matmul, ManySmallBatchesSpreadOverThreads) {
  // 32 products of 32x32x32: each below OpenBLAS's threading threshold, so the batch loop is parallel.
  check_case({{32}, 32, 32, 32}, DType::kFloat32, {.trans_a = true, .beta = 0.5}, 18);
  check_case({{4, 8}, 32, 32, 32}, DType::kFloat64, {.trans_b = true}, 19);
}

TEST(Matmul, EmptyMOrNLeavesNothingToDo) {
  for (DType dtype : kDTypes) {
    check_case({{}, 0, 5, 3}, dtype, {}, 13);
    check_case({{}, 4, 0, 3}, dtype, {.trans_b = true}, 14);
    check_case({{0}, 4, 5, 3}, dtype, {}, 15);
    check_case({{0}, 4, 5, 3, true}, dtype, {}, 16);
  }
}

TEST(Matmul, EmptyInnerDimGivesBetaTimesOut) {
  for (DType dtype : kDTypes) {
    Tensor a = Tensor::empty({3, 0}, dtype), b = Tensor::empty({0, 4}, dtype);
    Tensor out = random_tensor({3, 4}, dtype, 17);
    Tensor expected = Tensor::empty({3, 4}, DType::kFloat64);
    for (int64_t i = 0; i < 12; ++i) expected.data<double>()[i] = 2.0 * out.element_as_double(i);
    matmul(a, b, out, {.beta = 2.0});
    EXPECT_TRUE(all_close(out, expected, 0, 0, "K=0, beta=2"));

    // beta == 0 overwrites out, even NaN.
    out.fill(NAN);
    matmul(a, b, out, {});
    EXPECT_TRUE(all_close(out, Tensor::zeros({3, 4}, DType::kFloat64), 0, 0, "K=0, beta=0"));
  }
}

TEST(Matmul, ErrorsNameTheShapes) {
  Tensor a = Tensor::zeros({4, 5}, DType::kFloat32), b = Tensor::zeros({6, 7}, DType::kFloat32);
  Tensor out = Tensor::zeros({4, 7}, DType::kFloat32);
  EXPECT_THAT([&] { matmul(a, b, out); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr(
                  "matmul: a float32[4, 5] and b float32[6, 7]: inner dims 5 and 6 differ")));
  Tensor b2 = Tensor::zeros({5, 7}, DType::kFloat32);
  EXPECT_THAT([&] { matmul(a, b2, Tensor::zeros({4, 6}, DType::kFloat32)); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("out is float32[4, 6], expected [4, 7]")));
  EXPECT_THAT([&] { matmul(a, Tensor::zeros({5, 7}, DType::kFloat64), out); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("dtypes differ")));
  EXPECT_THAT([&] {
    matmul(Tensor::zeros({2, 4, 5}, DType::kFloat32), Tensor::zeros({3, 5, 7}, DType::kFloat32),
           Tensor::zeros({2, 4, 7}, DType::kFloat32));
  }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("batch dims differ")));
  EXPECT_THAT([&] { matmul(Tensor::zeros({5}, DType::kFloat32), b2, out); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("at least 2 dims")));
  EXPECT_THAT([&] {
    Tensor i = Tensor::zeros({4, 5}, DType::kInt32);
    matmul(i, Tensor::zeros({5, 7}, DType::kInt32), Tensor::zeros({4, 7}, DType::kInt32));
  }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("float32, float64 or bfloat16")));
  Tensor sq = Tensor::zeros({4, 4}, DType::kFloat32);
  EXPECT_THAT([&] { matmul(sq, Tensor::zeros({4, 4}, DType::kFloat32), sq); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("must not overlap")));
}

}  // namespace
}  // namespace hspmd::kernels
