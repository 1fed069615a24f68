// lm_head_loss_stats / lm_head_loss_bwd against the unfused head (matmul then the cross-entropy
// kernels) over several chunk sizes, vocabulary shards, finite differences, bf16 operands under each
// bf16 GEMM, and argument errors.
#include "hspmd/kernels/lm_head_loss.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <iostream>
#include <vector>

#include "hspmd/kernels/matmul.h"
#include "hspmd/kernels/reduce.h"
#include "kernels/kernel_testlib.h"

namespace hspmd::kernels {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using hspmd::testing::all_close;
using hspmd::testing::max_relative_error;
using hspmd::testing::numeric_gradient;
using hspmd::testing::random_ints;
using hspmd::testing::random_tensor;

constexpr int64_t T = 13, H = 8, V = 11;

// Targets in [0, V) with two ignored tokens.
Tensor head_targets() {
  Tensor t = random_ints({T}, DType::kInt64, 3, 0, V);
  t.data<int64_t>()[2] = -100;
  t.data<int64_t>()[9] = -100;
  return t;
}

struct HeadResult {
  Tensor losses, lse, dx, dw;
};

Tensor per_token(DType dtype, double value) { return Tensor::full({T}, dtype, value); }

// The unfused head: logits = x w^T, then cross_entropy_fwd / _bwd.
HeadResult unfused(const Tensor& x, const Tensor& w, const Tensor& targets, bool bf16 = false,
                   const CrossEntropyOptions& loss = {}) {
  const DType dt = x.dtype();
  Tensor logits = Tensor::empty({T, V}, dt), dlogits = Tensor::empty({T, V}, dt);
  matmul(x, w, logits, {.trans_b = true, .bf16_operands = bf16});
  HeadResult r{Tensor::empty({T}, dt), Tensor::empty({T}, dt), Tensor::empty({T, H}, dt), Tensor::empty({V, H}, dt)};
  cross_entropy_fwd(logits, targets, r.losses, r.lse, loss);
  cross_entropy_bwd(logits, targets, r.lse, per_token(dt, 0.5), dlogits, loss);
  matmul(dlogits, w, r.dx, {.bf16_operands = bf16});
  matmul(dlogits, x, r.dw, {.trans_a = true, .bf16_operands = bf16});
  return r;
}

HeadResult fused(const Tensor& x, const Tensor& w, const Tensor& targets, LmHeadLossOptions o) {
  const DType dt = x.dtype();
  Tensor stats = Tensor::empty({3, T}, DType::kFloat64);
  lm_head_loss_stats(x, w, targets, stats, o);
  HeadResult r{Tensor::empty({T}, dt), Tensor::empty({T}, dt), Tensor::empty({T, H}, dt), Tensor::empty({V, H}, dt)};
  cross_entropy_combine(stats, targets, r.losses, r.lse, o.loss);
  lm_head_loss_bwd(x, w, targets, r.lse, per_token(dt, 0.5), r.dx, r.dw, o);
  return r;
}

void expect_same(const HeadResult& got, const HeadResult& want, double tol, const std::string& what) {
  EXPECT_TRUE(all_close(got.losses, want.losses, tol, tol, what + " losses"));
  EXPECT_TRUE(all_close(got.lse, want.lse, tol, tol, what + " lse"));
  EXPECT_TRUE(all_close(got.dx, want.dx, tol, tol, what + " dx"));
  EXPECT_TRUE(all_close(got.dw, want.dw, tol, tol, what + " dw"));
}

// One chunk, chunks that divide T and ones that leave a short last chunk: the same as the unfused
// head, up to the order of dw's additions.
TEST(LmHeadLoss, EqualsMatmulThenCrossEntropyForAnyChunkSize) {
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    Tensor x = random_tensor({T, H}, dtype, 1, -2, 2), w = random_tensor({V, H}, dtype, 2, -2, 2);
    const HeadResult want = unfused(x, w, head_targets());
    for (int64_t chunk : {0, 1, 4, 13, 64}) {
      expect_same(fused(x, w, head_targets(), {.loss = {}, .chunk_rows = chunk}), want, dtype == DType::kFloat64 ? 1e-12 : 2e-6,
                  std::string(dtype_name(dtype)) + " chunk " + std::to_string(chunk));
    }
  }
}

// Two shards of the vocabulary (rows [0, 5) and [5, 11) of w): their gathered statistics give the
// whole row's losses and lse, and each shard's dw is its rows of the whole dw; dx sums over shards.
TEST(LmHeadLoss, VocabularyShardsCombineIntoTheWholeRow) {
  Tensor x = random_tensor({T, H}, DType::kFloat64, 4), w = random_tensor({V, H}, DType::kFloat64, 5);
  const Tensor targets = head_targets();
  const HeadResult whole = unfused(x, w, targets);
  const int64_t split = 5;
  const std::vector<std::pair<int64_t, int64_t>> shards = {{0, split}, {split, V - split}};
  Tensor all = Tensor::empty({2, 3, T}, DType::kFloat64);
  std::vector<Tensor> ws;
  for (size_t i = 0; i < shards.size(); ++i) {
    ws.push_back(w.narrow(0, shards[i].first, shards[i].second).clone());
    const LmHeadLossOptions o{.loss = {.vocab_start = shards[i].first, .vocab_size = V}, .chunk_rows = 4};
    lm_head_loss_stats(x, ws[i], targets, all.narrow(0, static_cast<int64_t>(i), 1).reshape({3, T}), o);
  }
  Tensor losses = Tensor::empty({T}, DType::kFloat64), lse = Tensor::empty({T}, DType::kFloat64);
  cross_entropy_combine(all, targets, losses, lse);
  EXPECT_TRUE(all_close(losses, whole.losses, 1e-12, 1e-12, "losses"));
  EXPECT_TRUE(all_close(lse, whole.lse, 1e-12, 1e-12, "lse"));
  Tensor dx_sum = Tensor::zeros({T, H}, DType::kFloat64);
  for (size_t i = 0; i < shards.size(); ++i) {
    const LmHeadLossOptions o{.loss = {.vocab_start = shards[i].first, .vocab_size = V}, .chunk_rows = 4};
    Tensor dx = Tensor::empty({T, H}, DType::kFloat64), dw = Tensor::empty(ws[i].shape(), DType::kFloat64);
    lm_head_loss_bwd(x, ws[i], targets, lse, per_token(DType::kFloat64, 0.5), dx, dw, o);
    EXPECT_TRUE(all_close(dw, whole.dw.narrow(0, shards[i].first, shards[i].second), 1e-12, 1e-12,
                          "dw of shard " + std::to_string(i)));
    for (int64_t j = 0; j < dx.numel(); ++j) dx_sum.data<double>()[j] += dx.data<double>()[j];
  }
  EXPECT_TRUE(all_close(dx_sum, whole.dx, 1e-12, 1e-12, "dx summed over the shards"));
}

// d (0.5 * sum of token losses) / dx and / dw by central differences, in float64.
TEST(LmHeadLoss, BackwardMatchesFiniteDifferences) {
  Tensor x = random_tensor({T, H}, DType::kFloat64, 6), w = random_tensor({V, H}, DType::kFloat64, 7);
  const Tensor targets = head_targets();
  auto loss = [&] {
    Tensor stats = Tensor::empty({3, T}, DType::kFloat64);
    lm_head_loss_stats(x, w, targets, stats, {.loss = {}, .chunk_rows = 5});
    Tensor losses = Tensor::empty({T}, DType::kFloat64), lse = Tensor::empty({T}, DType::kFloat64);
    cross_entropy_combine(stats, targets, losses, lse);
    return 0.5 * sum_all(losses);
  };
  const HeadResult r = fused(x, w, targets, {.loss = {}, .chunk_rows = 5});
  EXPECT_LT(max_relative_error(r.dx, numeric_gradient(loss, x)), 1e-7);
  EXPECT_LT(max_relative_error(r.dw, numeric_gradient(loss, w)), 1e-7);
}

// Soft-capped logits (Gemma): the unfused head with the same cross-entropy option, over chunk sizes;
// and finite differences through the cap.
TEST(LmHeadLoss, SoftCappedEqualsTheUnfusedSoftCappedHead) {
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    Tensor x = random_tensor({T, H}, dtype, 11, -2, 2), w = random_tensor({V, H}, dtype, 12, -2, 2);
    const CrossEntropyOptions loss{.softcap = 3.0};
    const HeadResult want = unfused(x, w, head_targets(), false, loss);
    for (int64_t chunk : {0, 4, 13}) {
      expect_same(fused(x, w, head_targets(), {.loss = loss, .chunk_rows = chunk}), want,
                  dtype == DType::kFloat64 ? 1e-12 : 2e-6,
                  std::string(dtype_name(dtype)) + " softcap, chunk " + std::to_string(chunk));
    }
  }
  Tensor x = random_tensor({T, H}, DType::kFloat64, 13, -2, 2), w = random_tensor({V, H}, DType::kFloat64, 14, -2, 2);
  const Tensor targets = head_targets();
  const LmHeadLossOptions o{.loss = {.softcap = 3.0}, .chunk_rows = 5};
  auto loss = [&] {
    Tensor stats = Tensor::empty({3, T}, DType::kFloat64);
    lm_head_loss_stats(x, w, targets, stats, o);
    Tensor losses = Tensor::empty({T}, DType::kFloat64), lse = Tensor::empty({T}, DType::kFloat64);
    cross_entropy_combine(stats, targets, losses, lse);
    return 0.5 * sum_all(losses);
  };
  const HeadResult r = fused(x, w, targets, o);
  const double ex = max_relative_error(r.dx, numeric_gradient(loss, x));
  const double ew = max_relative_error(r.dw, numeric_gradient(loss, w));
  EXPECT_LT(ex, 1e-7);
  EXPECT_LT(ew, 1e-7);
  std::cout << "[ lm_head_loss softcap 3 ] max relative error vs finite differences: dx " << ex << ", dw " << ew
            << "\n";
}

// bf16 operands round x, w and dlogits where matmul's option does: the unfused head's bf16 run, up to
// the order of additions, under each bf16 GEMM; and measurably not the float32 head.
class LmHeadLossBf16 : public hspmd::testing::EachBf16Gemm {};

TEST_P(LmHeadLossBf16, EqualsTheUnfusedBf16Head) {
  Tensor x = random_tensor({T, H}, DType::kFloat32, 8, -2, 2), w = random_tensor({V, H}, DType::kFloat32, 9, -2, 2);
  const HeadResult bf16 = unfused(x, w, head_targets(), /*bf16=*/true);
  for (int64_t chunk : {0, 4}) {
    expect_same(fused(x, w, head_targets(), {.loss = {}, .bf16_operands = true, .chunk_rows = chunk}), bf16, 1e-5,
                "bf16 chunk " + std::to_string(chunk));
  }
  const HeadResult f32 = unfused(x, w, head_targets());
  EXPECT_GT(max_relative_error(fused(x, w, head_targets(), {.loss = {}, .bf16_operands = true}).dw, f32.dw), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Gemms, LmHeadLossBf16, hspmd::testing::each_bf16_gemm(), hspmd::testing::bf16_gemm_test_name);

TEST(LmHeadLoss, NoTokensGiveZeroWeightGradient) {
  Tensor x = Tensor::empty({0, H}, DType::kFloat32), w = random_tensor({V, H}, DType::kFloat32, 10);
  Tensor targets = Tensor::empty({0}, DType::kInt64), stats = Tensor::empty({3, 0}, DType::kFloat64);
  lm_head_loss_stats(x, w, targets, stats);
  Tensor dx = Tensor::empty({0, H}, DType::kFloat32), dw = random_tensor({V, H}, DType::kFloat32, 11);
  Tensor none = Tensor::empty({0}, DType::kFloat32);
  lm_head_loss_bwd(x, w, targets, none, none, dx, dw);
  EXPECT_TRUE(all_close(dw, Tensor::zeros({V, H}, DType::kFloat32), 0, 0, "dw"));
}

TEST(LmHeadLoss, RejectsBadArguments) {
  Tensor x = random_tensor({T, H}, DType::kFloat32, 12), w = random_tensor({V, H}, DType::kFloat32, 13);
  Tensor stats = Tensor::empty({3, T}, DType::kFloat64);
  Tensor w_bad = random_tensor({V, H + 1}, DType::kFloat32, 14);
  EXPECT_THAT([&] { lm_head_loss_stats(x, w_bad, head_targets(), stats); },
              ThrowsMessage<Error>(HasSubstr("lm_head_loss_stats: x float32[13, 8] and w float32[11, 9] must be")));
  Tensor targets = head_targets();
  targets.data<int64_t>()[4] = V;
  EXPECT_THAT([&] { lm_head_loss_stats(x, w, targets, stats); },
              ThrowsMessage<Error>(HasSubstr("target 11 at position 4")));
  Tensor x64 = random_tensor({T, H}, DType::kFloat64, 15), w64 = random_tensor({V, H}, DType::kFloat64, 16);
  EXPECT_THAT([&] { lm_head_loss_stats(x64, w64, head_targets(), stats, {.loss = {}, .bf16_operands = true}); },
              ThrowsMessage<Error>(HasSubstr("bf16 operands are rounded from float32")));
  EXPECT_THAT([&] { lm_head_loss_stats(x, w, head_targets(), Tensor::empty({3, T}, DType::kFloat32)); },
              ThrowsMessage<Error>(HasSubstr("stats float32[3, 13] must be float64 [3, 13]")));
}

}  // namespace
}  // namespace hspmd::kernels
