#include "hspmd/kernels/cross_entropy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "hspmd/kernels/slice.h"
#include "kernels/kernel_testlib.h"

namespace hspmd::kernels {
namespace {

using hspmd::testing::all_close;
using hspmd::testing::dot;
using hspmd::testing::max_relative_error;
using hspmd::testing::numeric_gradient;
using hspmd::testing::random_ints;
using hspmd::testing::random_tensor;

constexpr int64_t kIgnore = -100;

struct Reference {
  Tensor losses, lse, dlogits;  // float64; dlogits for dlosses = 1
};

// Plain long double loops: lse = log(sum(exp(logits))), loss = -log(softmax[target]).
Reference reference(const Tensor& logits, const Tensor& targets) {
  const int64_t v = logits.dim(-1), rows = logits.numel() / v;
  Reference r{Tensor::empty({rows}, DType::kFloat64), Tensor::empty({rows}, DType::kFloat64),
              Tensor::empty(logits.shape(), DType::kFloat64)};
  for (int64_t t = 0; t < rows; ++t) {
    auto exp_logit = [&](int64_t j) { return std::exp(static_cast<long double>(logits.element_as_double(t * v + j))); };
    long double sum = 0;
    for (int64_t j = 0; j < v; ++j) sum += exp_logit(j);
    const auto target = static_cast<int64_t>(targets.element_as_double(t));
    r.lse.data<double>()[t] = static_cast<double>(std::log(sum));
    r.losses.data<double>()[t] = target == kIgnore ? 0.0 : static_cast<double>(-std::log(exp_logit(target) / sum));
    for (int64_t j = 0; j < v; ++j) {
      const long double p = exp_logit(j) / sum;
      r.dlogits.data<double>()[t * v + j] = target == kIgnore ? 0.0 : static_cast<double>(p - (j == target ? 1 : 0));
    }
  }
  return r;
}

struct Forward {
  Tensor losses, lse;
};

Forward fwd(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options = {}) {
  const int64_t rows = logits.numel() / logits.dim(-1);
  Forward f{Tensor::empty({rows}, logits.dtype()), Tensor::empty({rows}, logits.dtype())};
  cross_entropy_fwd(logits, targets, f.losses, f.lse, options);
  return f;
}

Tensor bwd(const Tensor& logits, const Tensor& targets, const Tensor& dlosses,
           const CrossEntropyOptions& options = {}) {
  Tensor dlogits = Tensor::empty(logits.shape(), logits.dtype());
  cross_entropy_bwd(logits, targets, fwd(logits, targets, options).lse, dlosses, dlogits, options);
  return dlogits;
}

// Targets in [0, vocab) with every third token ignored.
Tensor targets_with_ignored(const Shape& shape, DType dtype, int64_t vocab, uint64_t seed) {
  Tensor targets = random_ints(shape, dtype, seed, 0, vocab);
  for (int64_t t = 1; t < targets.numel(); t += 3) {
    if (dtype == DType::kInt32) {
      targets.data<int32_t>()[t] = kIgnore;
    } else {
      targets.data<int64_t>()[t] = kIgnore;
    }
  }
  return targets;
}

TEST(CrossEntropy, MatchesLongDoubleReference) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (DType target_dtype : {DType::kInt32, DType::kInt64}) {
      for (const Shape& shape : {Shape{5, 11}, Shape{1, 1}, Shape{3, 2, 7}, Shape{4, 1000}}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::string(dtype_name(target_dtype)) + " " +
                     shape.to_string());
        Tensor logits = random_tensor(shape, dtype, 1, -3, 3);
        Tensor targets = targets_with_ignored(shape.with_dim(-1, 1), target_dtype, shape.dim(-1), 2);
        const Reference ref = reference(logits, targets);
        const double tol = dtype == DType::kFloat32 ? 1e-6 : 1e-14;
        Forward f = fwd(logits, targets);
        EXPECT_TRUE(all_close(f.losses, ref.losses, tol, tol, "losses"));
        EXPECT_TRUE(all_close(f.lse, ref.lse, tol, tol, "lse"));
        Tensor ones = Tensor::full({f.losses.numel()}, dtype, 1.0);
        EXPECT_TRUE(all_close(bwd(logits, targets, ones), ref.dlogits, tol, tol, "dlogits"));
      }
    }
  }
}

TEST(CrossEntropy, IgnoredTokensGiveZeroLossAndZeroGradient) {
  Tensor logits = random_tensor({4, 6}, DType::kFloat64, 3, -3, 3);
  Tensor targets = Tensor::from_vector<int64_t>({4}, {kIgnore, 2, kIgnore, 5});
  Forward f = fwd(logits, targets);
  EXPECT_EQ(f.losses.data<double>()[0], 0.0);
  EXPECT_EQ(f.losses.data<double>()[2], 0.0);
  EXPECT_GT(f.losses.data<double>()[1], 0.0);
  Tensor dlogits = bwd(logits, targets, random_tensor({4}, DType::kFloat64, 4, 0.5, 1.5));
  for (int64_t row : {0, 2}) {
    for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(dlogits.data<double>()[row * 6 + j], 0.0) << row << ", " << j;
  }
  // A custom ignore_index: -1 is ignored instead, and -100 becomes an ordinary (out of range) target.
  Tensor custom = Tensor::from_vector<int32_t>({4}, {-1, 2, -1, 5});
  Forward g = fwd(logits, custom, {.ignore_index = -1});
  EXPECT_TRUE(all_close(g.losses, f.losses, 0, 0, "ignore_index -1"));
  EXPECT_THROW(fwd(logits, targets, {.ignore_index = -1}), Error);
}

TEST(CrossEntropy, ExtremeLogitsStayFinite) {
  // Row 0 (target 1, max 1e4): loss = lse - (1e4 - 1) = log(e^0 + e^-1 + e^-20000) + 1.
  // Row 1 (target 0, max -1e4 + 2): loss = lse + 1e4 = log(e^-2 + e^0 + e^-2) + 2 = log(2 + e^2).
  const std::vector<double> values = {1e4, 1e4 - 1, -1e4, -1e4, -1e4 + 2, -1e4};
  const double row0 = 1.3132616875182228, row1 = 2.2395447662218846;
  Tensor targets = Tensor::from_vector<int64_t>({2}, {1, 0});
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor logits = Tensor::empty({2, 3}, dtype);
    for (int64_t i = 0; i < 6; ++i) {
      if (dtype == DType::kFloat32) {
        logits.data<float>()[i] = static_cast<float>(values[i]);
      } else {
        logits.data<double>()[i] = values[i];
      }
    }
    Forward f = fwd(logits, targets);
    const double tol = dtype == DType::kFloat32 ? 1e-6 : 1e-14;
    EXPECT_TRUE(all_close(f.losses, Tensor::from_vector<double>({2}, {row0, row1}), tol, tol, "losses"));
    // lse near +-1e4 is stored at the dtype's precision (float32: 1e-3 absolute), which bounds how
    // exactly the backward's softmax can be recovered from it.
    const double grad_tol = dtype == DType::kFloat32 ? 2e-3 : 1e-12;
    Tensor ones = Tensor::full({2}, dtype, 1.0);
    EXPECT_TRUE(all_close(bwd(logits, targets, ones), reference(logits, targets).dlogits, grad_tol, grad_tol,
                          "dlogits"));
  }
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  Tensor logits = random_tensor({4, 9}, DType::kFloat64, 5, -3, 3);
  Tensor targets = Tensor::from_vector<int32_t>({4}, {3, kIgnore, 0, 8});
  Tensor probe = random_tensor({4}, DType::kFloat64, 6);  // loss = sum(losses * probe)
  Tensor dlogits_num = numeric_gradient([&] { return dot(fwd(logits, targets).losses, probe); }, logits);
  EXPECT_LT(max_relative_error(bwd(logits, targets, probe), dlogits_num), 1e-6);
}

TEST(CrossEntropy, EmptyTokens) {
  Tensor logits = Tensor::empty({0, 5}, DType::kFloat32);
  Tensor targets = Tensor::empty({0}, DType::kInt64);
  EXPECT_EQ(fwd(logits, targets).losses.numel(), 0);
  EXPECT_EQ(bwd(logits, targets, Tensor::empty({0}, DType::kFloat32)).numel(), 0);
}

// Vocab-parallel: three uneven column shards, each computing its statistics; the combined loss and
// lse equal the whole-row kernel's, and each shard's backward is its columns of the whole gradient.
TEST(CrossEntropy, VocabShardsCombineToTheWholeRow) {
  const int64_t rows = 6, vocab = 13;
  const std::vector<std::pair<int64_t, int64_t>> shards = {{0, 5}, {5, 4}, {9, 4}};  // (start, columns)
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(dtype_name(dtype));
    // Row 3 has one huge logit in the last shard: the other shards' statistics are rescaled to it.
    Tensor logits = random_tensor({rows, vocab}, dtype, 8, -3, 3);
    if (dtype == DType::kFloat32) logits.data<float>()[3 * vocab + 11] = 300.0f;
    if (dtype == DType::kFloat64) logits.data<double>()[3 * vocab + 11] = 300.0;
    Tensor targets = targets_with_ignored({rows}, DType::kInt64, vocab, 9);
    const Forward whole = fwd(logits, targets);
    Tensor ones = Tensor::full({rows}, dtype, 1.0);
    const Tensor whole_grad = bwd(logits, targets, ones);
    Tensor all = Tensor::empty({static_cast<int64_t>(shards.size()), 3, rows}, DType::kFloat64);
    std::vector<Tensor> parts;
    for (size_t i = 0; i < shards.size(); ++i) {
      const auto [start, columns] = shards[i];
      Tensor part = Tensor::empty({rows, columns}, dtype);
      slice(logits, 1, start, columns, part);
      const CrossEntropyOptions o{.vocab_start = start, .vocab_size = vocab};
      cross_entropy_shard_stats(part, targets, all.narrow(0, static_cast<int64_t>(i), 1), o);
      parts.push_back(part);
    }
    Forward combined{Tensor::empty({rows}, dtype), Tensor::empty({rows}, dtype)};
    cross_entropy_combine(all, targets, combined.losses, combined.lse);
    const double tol = dtype == DType::kFloat32 ? 1e-6 : 1e-14;
    EXPECT_TRUE(all_close(combined.losses, whole.losses, tol, tol, "losses"));
    EXPECT_TRUE(all_close(combined.lse, whole.lse, tol, tol, "lse"));
    for (size_t i = 0; i < shards.size(); ++i) {
      const auto [start, columns] = shards[i];
      Tensor grad = Tensor::empty({rows, columns}, dtype), expected = Tensor::empty({rows, columns}, dtype);
      cross_entropy_bwd(parts[i], targets, combined.lse, ones, grad, {.vocab_start = start, .vocab_size = vocab});
      slice(whole_grad, 1, start, columns, expected);
      EXPECT_TRUE(all_close(grad, expected, tol, tol, "dlogits of shard " + std::to_string(i)));
    }
  }
  // A target beyond the whole vocabulary is still an error on every shard; a shard past the end too.
  Tensor part = random_tensor({2, 4}, DType::kFloat32, 10);
  Tensor stats = Tensor::empty({3, 2}, DType::kFloat64);
  using hspmd::testing::error_of;
  EXPECT_THAT(error_of([&] {
                cross_entropy_shard_stats(part, Tensor::from_vector<int64_t>({2}, {0, 13}), stats,
                                          {.vocab_start = 4, .vocab_size = 13});
              }),
              ::testing::HasSubstr("target 13 at position 1"));
  EXPECT_THAT(error_of([&] {
                cross_entropy_shard_stats(part, Tensor::from_vector<int64_t>({2}, {0, 1}), stats,
                                          {.vocab_start = 10, .vocab_size = 13});
              }),
              ::testing::HasSubstr("does not fit a vocabulary of 13"));
}

// Soft-capping (Gemma's final_logit_softcapping): the loss of cap * tanh(logits / cap), dlogits of
// the raw logits.
Tensor soft_capped(const Tensor& logits, double cap) {
  Tensor out = Tensor::empty(logits.shape(), DType::kFloat64);
  for (int64_t i = 0; i < out.numel(); ++i) out.data<double>()[i] = cap * std::tanh(logits.element_as_double(i) / cap);
  return out;
}

TEST(CrossEntropySoftcap, MatchesTheReferenceOnCappedLogits) {
  const double cap = 5.0;
  double worst = 0;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    Tensor logits = random_tensor({5, 37}, dtype, 30, -20, 20);
    Tensor targets = targets_with_ignored({5}, DType::kInt64, 37, 31);
    const CrossEntropyOptions o{.softcap = cap};
    const Tensor capped = soft_capped(logits, cap);
    const Reference r = reference(capped, targets);
    const Forward f = fwd(logits, targets, o);
    const double tol = dtype == DType::kFloat32 ? 2e-6 : 1e-13;
    EXPECT_TRUE(all_close(f.losses, r.losses, tol, tol, "losses"));
    EXPECT_TRUE(all_close(f.lse, r.lse, tol, tol, "lse"));
    Tensor expected = r.dlogits.clone();
    for (int64_t i = 0; i < expected.numel(); ++i) {
      const double t = capped.data<double>()[i] / cap;
      expected.data<double>()[i] *= 1 - t * t;
    }
    const Tensor grad = bwd(logits, targets, Tensor::full({5}, dtype, 1.0), o);
    EXPECT_TRUE(all_close(grad, expected, tol, tol, "dlogits"));
    if (dtype == DType::kFloat32) worst = std::max(worst, max_relative_error(f.losses, r.losses));
  }
  std::cout << "[ softcap ] float32 losses max relative error vs the long double reference: " << worst << "\n";
}

TEST(CrossEntropySoftcap, BackwardMatchesFiniteDifferencesAndMayOverwriteTheLogits) {
  Tensor logits = random_tensor({4, 9}, DType::kFloat64, 32, -6, 6);
  Tensor targets = Tensor::from_vector<int32_t>({4}, {3, kIgnore, 0, 8});
  Tensor probe = random_tensor({4}, DType::kFloat64, 33);
  const CrossEntropyOptions o{.softcap = 2.0};
  Tensor numeric = numeric_gradient([&] { return dot(fwd(logits, targets, o).losses, probe); }, logits);
  const Tensor grad = bwd(logits, targets, probe, o);
  const double e = max_relative_error(grad, numeric);
  EXPECT_LT(e, 1e-6);
  std::cout << "[ softcap ] dlogits max relative error vs finite differences: " << e << "\n";
  // In place, as the fused lm head runs it.
  Tensor lse = fwd(logits, targets, o).lse;
  cross_entropy_bwd(logits, targets, lse, probe, logits, o);
  EXPECT_TRUE(all_close(logits, grad, 0, 0, "dlogits written over the logits"));
}

TEST(CrossEntropySoftcap, VocabShardsCombineToTheWholeRow) {
  const int64_t rows = 4, vocab = 11;
  Tensor logits = random_tensor({rows, vocab}, DType::kFloat64, 34, -40, 40);
  Tensor targets = targets_with_ignored({rows}, DType::kInt64, vocab, 35);
  const Forward whole = fwd(logits, targets, {.softcap = 30.0});
  Tensor all = Tensor::empty({2, 3, rows}, DType::kFloat64);
  for (int64_t i = 0; i < 2; ++i) {
    const int64_t start = i * 6, columns = i == 0 ? 6 : 5;
    Tensor part = Tensor::empty({rows, columns}, DType::kFloat64);
    slice(logits, 1, start, columns, part);
    cross_entropy_shard_stats(part, targets, all.narrow(0, i, 1),
                              {.vocab_start = start, .vocab_size = vocab, .softcap = 30.0});
  }
  Forward combined{Tensor::empty({rows}, DType::kFloat64), Tensor::empty({rows}, DType::kFloat64)};
  cross_entropy_combine(all, targets, combined.losses, combined.lse);
  EXPECT_TRUE(all_close(combined.losses, whole.losses, 1e-14, 1e-14, "losses"));
  EXPECT_TRUE(all_close(combined.lse, whole.lse, 1e-14, 1e-14, "lse"));
  using ::testing::HasSubstr;
  EXPECT_THAT([&] { fwd(logits, targets, {.softcap = -1.0}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("cross_entropy_fwd: softcap -1 must be finite and >= 0")));
}

TEST(CrossEntropy, BadInputsNameKernelTensorAndPosition) {
  using ::testing::AllOf;
  using ::testing::HasSubstr;
  using hspmd::testing::error_of;
  Tensor logits = random_tensor({3, 5}, DType::kFloat32, 7);
  EXPECT_THAT(error_of([&] { fwd(logits, Tensor::from_vector<int64_t>({3}, {0, 4, 5})); }),
              AllOf(HasSubstr("cross_entropy_fwd"), HasSubstr("target 5 at position 2"), HasSubstr("[0, 5)")));
  EXPECT_THAT(error_of([&] { fwd(logits, Tensor::from_vector<int32_t>({3}, {-1, 0, 0})); }),
              HasSubstr("target -1 at position 0"));
  EXPECT_THAT(error_of([&] {
                Tensor dlogits = Tensor::empty({3, 5}, DType::kFloat32);
                Tensor per_row = Tensor::empty({3}, DType::kFloat32);
                cross_entropy_bwd(logits, Tensor::from_vector<int64_t>({3}, {0, 9, 0}), per_row, per_row, dlogits);
              }),
              AllOf(HasSubstr("cross_entropy_bwd"), HasSubstr("target 9 at position 1")));
  EXPECT_THAT(error_of([&] { fwd(logits, Tensor::from_vector<int64_t>({2}, {0, 1})); }),
              AllOf(HasSubstr("cross_entropy_fwd"), HasSubstr("targets int64[2]")));
  EXPECT_THAT(error_of([&] {
                Tensor losses = Tensor::empty({3}, DType::kFloat64);
                cross_entropy_fwd(logits, Tensor::from_vector<int64_t>({3}, {0, 1, 2}), losses, losses);
              }),
              AllOf(HasSubstr("cross_entropy_fwd"), HasSubstr("'losses' is float64[3]")));
}

}  // namespace
}  // namespace hspmd::kernels
