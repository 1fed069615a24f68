// attention_fwd/bwd against a naive reference (full score rows, causal mask per sequence), central
// finite differences in float64, packed-vs-alone, GQA-vs-repeated-MHA, degenerate lengths,
// thread-count determinism and the errors. The CPU tile is 64 tokens for D <= 64 and 32 for
// D = 128, so lengths like 70 and 130 cross (and end inside) tiles.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <vector>

#include "hspmd/kernels/attention.h"
#include "hspmd/kernels/cast.h"
#include "hspmd/kernels/cpu/vec_math.h"
#include "hspmd/kernels/threading.h"
#include "kernel_testlib.h"

namespace hspmd::kernels {
namespace {

using hspmd::testing::all_close;
using hspmd::testing::dot;
using hspmd::testing::max_relative_error;
using hspmd::testing::numeric_gradient;
using hspmd::testing::random_tensor;

struct Problem {
  Tensor q, k, v, cu;
  int64_t tokens() const { return q.dim(0); }
  int64_t nq() const { return q.dim(1); }
};

Problem make_problem(const std::vector<int64_t>& lens, int64_t nq, int64_t nkv, int64_t d, DType dtype,
                     uint64_t seed, DType cu_dtype = DType::kInt32) {
  std::vector<int64_t> cu{0};
  for (int64_t len : lens) cu.push_back(cu.back() + len);
  Tensor cut = Tensor::empty({static_cast<int64_t>(cu.size())}, cu_dtype);
  for (size_t i = 0; i < cu.size(); ++i) {
    if (cu_dtype == DType::kInt32) cut.data<int32_t>()[i] = static_cast<int32_t>(cu[i]);
    if (cu_dtype == DType::kInt64) cut.data<int64_t>()[i] = cu[i];
  }
  const int64_t t = cu.back();
  // Scores of order a few units, so the softmax is neither flat nor one-hot.
  return {random_tensor({t, nq, d}, dtype, seed, -2, 2), random_tensor({t, nkv, d}, dtype, seed + 1, -2, 2),
          random_tensor({t, nkv, d}, dtype, seed + 2), cut};
}

Tensor converted(const Tensor& x, DType dtype) {
  Tensor out = Tensor::empty(x.shape(), dtype);
  cast(x, out);
  return out;
}

// The float32 tensor of the bfloat16 values nearest x's.
Tensor bf16_values(const Tensor& x) { return converted(converted(x, DType::kBFloat16), DType::kFloat32); }

int64_t cu_at(const Tensor& cu, int64_t i) { return static_cast<int64_t>(cu.element_as_double(i)); }

// Naive attention in double: one full row of scores per query token, over the keys of its sequence
// that the explicit mask keeps: u <= t, and t - window < u under a window.
void reference_attention(const Problem& p, double scale, Tensor& out, Tensor& lse, int64_t window = 0) {
  const int64_t t_all = p.tokens(), nq = p.nq(), nkv = p.k.dim(1), d = p.q.dim(2), group = nq / nkv;
  out = Tensor::zeros(p.q.shape(), DType::kFloat64);
  lse = Tensor::zeros({nq, t_all}, DType::kFloat64);
  for (int64_t s = 0; s + 1 < p.cu.numel(); ++s) {
    const int64_t start = cu_at(p.cu, s), end = cu_at(p.cu, s + 1);
    for (int64_t h = 0; h < nq; ++h) {
      const int64_t g = h / group;
      for (int64_t t = start; t < end; ++t) {
        std::vector<double> scores;
        double m = -INFINITY;
        const int64_t from = window > 0 ? std::max(start, t - window + 1) : start;
        for (int64_t u = from; u <= t; ++u) {
          double x = 0;
          for (int64_t c = 0; c < d; ++c) {
            x += p.q.element_as_double((t * nq + h) * d + c) * p.k.element_as_double((u * nkv + g) * d + c);
          }
          scores.push_back(x * scale);
          m = std::max(m, x * scale);
        }
        double l = 0;
        for (double& x : scores) l += (x = std::exp(x - m));
        for (int64_t u = from; u <= t; ++u) {
          for (int64_t c = 0; c < d; ++c) {
            out.data<double>()[(t * nq + h) * d + c] +=
                scores[u - from] / l * p.v.element_as_double((u * nkv + g) * d + c);
          }
        }
        lse.data<double>()[h * t_all + t] = m + std::log(l);
      }
    }
  }
}

struct Forward {
  Tensor out, lse;
};

Forward run_fwd(const Problem& p, const AttentionOptions& o = {}) {
  Forward f{Tensor::empty(p.q.shape(), p.q.dtype()), Tensor::empty({p.nq(), p.tokens()}, p.q.dtype())};
  attention_fwd(p.q, p.k, p.v, p.cu, f.out, f.lse, o);
  return f;
}

struct Grads {
  Tensor dq, dk, dv;
};

Grads run_bwd(const Problem& p, const Forward& f, const Tensor& dout, const AttentionOptions& o = {}) {
  Grads g{Tensor::empty(p.q.shape(), p.q.dtype()), Tensor::empty(p.k.shape(), p.k.dtype()),
          Tensor::empty(p.v.shape(), p.v.dtype())};
  attention_bwd(p.q, p.k, p.v, p.cu, f.out, f.lse, dout, g.dq, g.dk, g.dv, o);
  return g;
}

::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  if (a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0) {
    return ::testing::AssertionSuccess();
  }
  return all_close(a, b, 0, 0, what);
}

TEST(Attention, ForwardAndLseMatchNaiveReference) {
  struct Case {
    std::vector<int64_t> lens;
    int64_t nq, nkv, d;
  };
  const Case cases[] = {{{70, 1, 130, 64}, 4, 2, 16}, {{33, 70}, 2, 2, 128}, {{5}, 3, 1, 7}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Case& c : cases) {
      Problem p = make_problem(c.lens, c.nq, c.nkv, c.d, dtype, 1, dtype == DType::kFloat32 ? DType::kInt32 : DType::kInt64);
      Forward f = run_fwd(p);
      Tensor out, lse;
      reference_attention(p, 1.0 / std::sqrt(static_cast<double>(c.d)), out, lse);
      const double tol = dtype == DType::kFloat32 ? 2e-5 : 1e-12;
      const std::string what = std::string(dtype_name(dtype)) + " D=" + std::to_string(c.d);
      EXPECT_TRUE(all_close(f.out, out, tol, tol, "out " + what));
      EXPECT_TRUE(all_close(f.lse, lse, tol, tol, "lse " + what));
    }
  }
}

TEST(Attention, ExplicitScale) {
  Problem p = make_problem({9, 12}, 2, 1, 8, DType::kFloat64, 2);
  Forward f = run_fwd(p, {.scale = 0.7});
  Tensor out, lse;
  reference_attention(p, 0.7, out, lse);
  EXPECT_TRUE(all_close(f.out, out, 1e-12, 1e-12, "out"));
  EXPECT_TRUE(all_close(f.lse, lse, 1e-12, 1e-12, "lse"));
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  // Two query heads share one kv head (GQA); 70 tokens cross a 64-token tile; lengths 1 and 3 are
  // tiny sequences in the same pack.
  Problem p = make_problem({70, 1, 3}, 2, 1, 4, DType::kFloat64, 3);
  Tensor w = random_tensor(p.q.shape(), DType::kFloat64, 4);
  Forward f = run_fwd(p);
  Grads g = run_bwd(p, f, w);
  auto loss = [&] { return dot(run_fwd(p).out, w); };
  EXPECT_LT(max_relative_error(g.dq, numeric_gradient(loss, p.q)), 1e-6) << "dq";
  EXPECT_LT(max_relative_error(g.dk, numeric_gradient(loss, p.k)), 1e-6) << "dk";
  EXPECT_LT(max_relative_error(g.dv, numeric_gradient(loss, p.v)), 1e-6) << "dv";
}

TEST(Attention, Float32BackwardAgreesWithFloat64) {
  Problem p64 = make_problem({130, 20}, 4, 2, 32, DType::kFloat64, 5);
  Problem p32{Tensor::empty(p64.q.shape(), DType::kFloat32), Tensor::empty(p64.k.shape(), DType::kFloat32),
              Tensor::empty(p64.v.shape(), DType::kFloat32), p64.cu};
  for (auto [dst, src] : {std::pair{p32.q, p64.q}, std::pair{p32.k, p64.k}, std::pair{p32.v, p64.v}}) {
    for (int64_t i = 0; i < src.numel(); ++i) dst.data<float>()[i] = static_cast<float>(src.data<double>()[i]);
  }
  Tensor w64 = random_tensor(p64.q.shape(), DType::kFloat64, 6);
  Tensor w32 = Tensor::empty(w64.shape(), DType::kFloat32);
  for (int64_t i = 0; i < w64.numel(); ++i) w32.data<float>()[i] = static_cast<float>(w64.data<double>()[i]);
  Grads g64 = run_bwd(p64, run_fwd(p64), w64);
  Grads g32 = run_bwd(p32, run_fwd(p32), w32);
  EXPECT_LT(max_relative_error(g32.dq, g64.dq), 2e-5);
  EXPECT_LT(max_relative_error(g32.dk, g64.dk), 2e-5);
  EXPECT_LT(max_relative_error(g32.dv, g64.dv), 2e-5);
}

TEST(Attention, PackedSequencesEqualEachAlone) {
  const std::vector<int64_t> lens{5, 70, 1, 64};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    Problem p = make_problem(lens, 4, 2, 16, dtype, 7);
    Tensor dout = random_tensor(p.q.shape(), dtype, 8);
    Forward f = run_fwd(p);
    Grads g = run_bwd(p, f, dout);
    int64_t start = 0;
    for (int64_t len : lens) {
      Problem one{p.q.narrow(0, start, len), p.k.narrow(0, start, len), p.v.narrow(0, start, len),
                  Tensor::from_vector<int32_t>({2}, {0, static_cast<int32_t>(len)})};
      Forward f1 = run_fwd(one);
      Grads g1 = run_bwd(one, f1, dout.narrow(0, start, len));
      const std::string what = " of the sequence at " + std::to_string(start);
      EXPECT_TRUE(bitwise_equal(f1.out, f.out.narrow(0, start, len), "out" + what));
      EXPECT_TRUE(bitwise_equal(g1.dq, g.dq.narrow(0, start, len), "dq" + what));
      EXPECT_TRUE(bitwise_equal(g1.dk, g.dk.narrow(0, start, len), "dk" + what));
      EXPECT_TRUE(bitwise_equal(g1.dv, g.dv.narrow(0, start, len), "dv" + what));
      for (int64_t h = 0; h < p.nq(); ++h) {
        for (int64_t t = 0; t < len; ++t) {
          EXPECT_EQ(f1.lse.element_as_double(h * len + t), f.lse.element_as_double(h * p.tokens() + start + t));
        }
      }
      start += len;
    }
  }
}

TEST(Attention, GroupedQueryEqualsMultiHeadWithRepeatedKv) {
  const int64_t nq = 6, nkv = 2, d = 8, group = nq / nkv;
  Problem gqa = make_problem({40, 67}, nq, nkv, d, DType::kFloat64, 9);
  const int64_t t_all = gqa.tokens();
  Problem mha{gqa.q, Tensor::empty({t_all, nq, d}, DType::kFloat64), Tensor::empty({t_all, nq, d}, DType::kFloat64),
              gqa.cu};
  for (int64_t t = 0; t < t_all; ++t) {
    for (int64_t h = 0; h < nq; ++h) {
      for (int64_t c = 0; c < d; ++c) {
        mha.k.data<double>()[(t * nq + h) * d + c] = gqa.k.data<double>()[(t * nkv + h / group) * d + c];
        mha.v.data<double>()[(t * nq + h) * d + c] = gqa.v.data<double>()[(t * nkv + h / group) * d + c];
      }
    }
  }
  Tensor dout = random_tensor(gqa.q.shape(), DType::kFloat64, 10);
  Forward fg = run_fwd(gqa), fm = run_fwd(mha);
  EXPECT_TRUE(all_close(fg.out, fm.out, 1e-13, 1e-13, "out"));
  EXPECT_TRUE(all_close(fg.lse, fm.lse, 1e-13, 1e-13, "lse"));
  Grads gg = run_bwd(gqa, fg, dout), gm = run_bwd(mha, fm, dout);
  EXPECT_TRUE(all_close(gg.dq, gm.dq, 1e-12, 1e-12, "dq"));
  // A shared kv head's gradient is the sum over the query heads of its group.
  Tensor dk_sum = Tensor::zeros(gqa.k.shape(), DType::kFloat64), dv_sum = Tensor::zeros(gqa.v.shape(), DType::kFloat64);
  for (int64_t t = 0; t < t_all; ++t) {
    for (int64_t h = 0; h < nq; ++h) {
      for (int64_t c = 0; c < d; ++c) {
        dk_sum.data<double>()[(t * nkv + h / group) * d + c] += gm.dk.data<double>()[(t * nq + h) * d + c];
        dv_sum.data<double>()[(t * nkv + h / group) * d + c] += gm.dv.data<double>()[(t * nq + h) * d + c];
      }
    }
  }
  EXPECT_TRUE(all_close(gg.dk, dk_sum, 1e-12, 1e-12, "dk"));
  EXPECT_TRUE(all_close(gg.dv, dv_sum, 1e-12, 1e-12, "dv"));
}

TEST(Attention, DegenerateLengths) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    // T = 0, with no sequence and with empty sequences.
    for (std::vector<int64_t> lens : {std::vector<int64_t>{}, std::vector<int64_t>{0, 0}}) {
      Problem p = make_problem(lens, 2, 1, 4, dtype, 11);
      Forward f = run_fwd(p);
      Grads g = run_bwd(p, f, Tensor::empty(p.q.shape(), dtype));
      EXPECT_EQ(f.out.numel(), 0);
      EXPECT_EQ(g.dk.numel(), 0);
    }
    // Length-1 sequences attend to themselves only: out = v, lse = the single scaled score.
    Problem p = make_problem({1, 0, 1, 1}, 2, 2, 4, dtype, 12);
    Forward f = run_fwd(p);
    EXPECT_TRUE(all_close(f.out, p.v, 1e-6, 1e-6, "length-1 out"));
    Grads g = run_bwd(p, f, random_tensor(p.q.shape(), dtype, 13));
    EXPECT_TRUE(all_close(g.dq, Tensor::zeros(p.q.shape(), DType::kFloat64), 0, 1e-6, "length-1 dq"));
  }
}

TEST(Attention, ThreadCountDoesNotChangeResults) {
  Problem p = make_problem({100, 37, 64}, 4, 2, 16, DType::kFloat32, 14);
  Tensor dout = random_tensor(p.q.shape(), DType::kFloat32, 15);
  const int saved = num_threads();
  set_num_threads(1);
  Forward f1 = run_fwd(p);
  Grads g1 = run_bwd(p, f1, dout);
  set_num_threads(2);
  Forward f2 = run_fwd(p);
  Grads g2 = run_bwd(p, f2, dout);
  set_num_threads(saved);
  EXPECT_TRUE(bitwise_equal(f1.out, f2.out, "out"));
  EXPECT_TRUE(bitwise_equal(f1.lse, f2.lse, "lse"));
  EXPECT_TRUE(bitwise_equal(g1.dq, g2.dq, "dq"));
  EXPECT_TRUE(bitwise_equal(g1.dk, g2.dk, "dk"));
  EXPECT_TRUE(bitwise_equal(g1.dv, g2.dv, "dv"));
}

TEST(Attention, ErrorsNameTheTensors) {
  Problem p = make_problem({3, 4}, 3, 2, 4, DType::kFloat32, 16);
  Forward f{Tensor::empty(p.q.shape(), DType::kFloat32), Tensor::empty({3, 7}, DType::kFloat32)};
  using ::testing::HasSubstr;
  using ::testing::ThrowsMessage;
  EXPECT_THAT([&] { attention_fwd(p.q, p.k, p.v, p.cu, f.out, f.lse); },
              ThrowsMessage<Error>(HasSubstr("attention_fwd: 2 kv heads must divide 3 query heads")));
  Problem ok = make_problem({3, 4}, 2, 2, 4, DType::kFloat32, 17);
  Tensor out = Tensor::empty(ok.q.shape(), DType::kFloat32);
  EXPECT_THAT([&] { attention_fwd(ok.q, ok.k, ok.v, ok.cu, out, Tensor::empty({7, 2}, DType::kFloat32)); },
              ThrowsMessage<Error>(HasSubstr("lse is float32[7, 2], expected float32[2, 7]")));
  Tensor lse = Tensor::empty({2, 7}, DType::kFloat32);
  EXPECT_THAT([&] { attention_fwd(ok.q, ok.k, ok.v, Tensor::from_vector<int32_t>({3}, {0, 5, 4}), out, lse); },
              ThrowsMessage<Error>(HasSubstr("cu_seqlens[2] = 4")));
  EXPECT_THAT([&] { attention_fwd(ok.q, ok.k, ok.v, Tensor::from_vector<int64_t>({2}, {0, 6}), out, lse); },
              ThrowsMessage<Error>(HasSubstr("cu_seqlens ends at 6 but q has 7 tokens")));
  EXPECT_THAT([&] { attention_fwd(ok.q, ok.k, ok.k.narrow(0, 0, 3), ok.cu, out, lse); },
              ThrowsMessage<Error>(HasSubstr("attention_fwd: v is float32[3, 2, 4], expected float32[7, 2, 4]")));
  EXPECT_THAT([&] {
    attention_bwd(ok.q, ok.k, ok.v, ok.cu, out, lse, out, Tensor::empty({7, 2, 4}, DType::kFloat64), ok.k, ok.v);
  }, ThrowsMessage<Error>(HasSubstr("attention_bwd: dq is float64[7, 2, 4]")));
}

// Sliding windows (AttentionOptions::window): shorter than a tile (1, 5), about a tile (64), longer
// than most sequences (100) and than all (1000), over packed sequences that cross tiles, with GQA.
TEST(AttentionWindow, ForwardMatchesMaskedReference) {
  struct Case {
    std::vector<int64_t> lens;
    int64_t nq, nkv, d;
  };
  const Case cases[] = {{{70, 1, 130, 64}, 4, 2, 16}, {{33, 170}, 2, 1, 128}};
  double worst = 0;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Case& c : cases) {
      Problem p = make_problem(c.lens, c.nq, c.nkv, c.d, dtype, 21);
      for (int64_t window : {1, 5, 64, 100, 1000}) {
        Forward f = run_fwd(p, {.window = window});
        Tensor out, lse;
        reference_attention(p, 1.0 / std::sqrt(static_cast<double>(c.d)), out, lse, window);
        const double tol = dtype == DType::kFloat32 ? 2e-5 : 1e-12;
        const std::string what = std::string(dtype_name(dtype)) + " D=" + std::to_string(c.d) + " window " +
                                 std::to_string(window);
        EXPECT_TRUE(all_close(f.out, out, tol, tol, "out " + what));
        EXPECT_TRUE(all_close(f.lse, lse, tol, tol, "lse " + what));
        if (dtype == DType::kFloat32) worst = std::max(worst, max_relative_error(f.out, out));
      }
    }
  }
  std::cout << "[ window ] float32 out max relative error vs the masked reference: " << worst << "\n";
}

TEST(AttentionWindow, OneKeyWindowCopiesV) {
  Problem p = make_problem({9, 70}, 2, 2, 4, DType::kFloat64, 22);
  EXPECT_TRUE(all_close(run_fwd(p, {.window = 1}).out, p.v, 1e-15, 1e-15, "window 1 out"));
}

TEST(AttentionWindow, WindowCoveringEverySequenceIsPlainCausal) {
  Problem p = make_problem({70, 1, 130}, 4, 2, 16, DType::kFloat32, 23);
  Tensor dout = random_tensor(p.q.shape(), DType::kFloat32, 24);
  Forward f0 = run_fwd(p), fw = run_fwd(p, {.window = 130});
  Grads g0 = run_bwd(p, f0, dout), gw = run_bwd(p, fw, dout, {.window = 130});
  EXPECT_TRUE(bitwise_equal(f0.out, fw.out, "out"));
  EXPECT_TRUE(bitwise_equal(f0.lse, fw.lse, "lse"));
  EXPECT_TRUE(bitwise_equal(g0.dq, gw.dq, "dq"));
  EXPECT_TRUE(bitwise_equal(g0.dk, gw.dk, "dk"));
  EXPECT_TRUE(bitwise_equal(g0.dv, gw.dv, "dv"));
}

TEST(AttentionWindow, BackwardMatchesFiniteDifferences) {
  // GQA; the 150-token sequence crosses key chunks, so windows of 7 and 40 skip whole chunks and
  // mask the first and last chunk a tile sees; 3 tokens is shorter than every window.
  Problem p = make_problem({150, 1, 3}, 2, 1, 4, DType::kFloat64, 25);
  Tensor w = random_tensor(p.q.shape(), DType::kFloat64, 26);
  for (int64_t window : {2, 7, 40}) {
    const AttentionOptions o{.window = window};
    Grads g = run_bwd(p, run_fwd(p, o), w, o);
    auto loss = [&] { return dot(run_fwd(p, o).out, w); };
    const std::string what = " window " + std::to_string(window);
    const double eq = max_relative_error(g.dq, numeric_gradient(loss, p.q));
    const double ek = max_relative_error(g.dk, numeric_gradient(loss, p.k));
    const double ev = max_relative_error(g.dv, numeric_gradient(loss, p.v));
    EXPECT_LT(eq, 1e-6) << "dq" << what;
    EXPECT_LT(ek, 1e-6) << "dk" << what;
    EXPECT_LT(ev, 1e-6) << "dv" << what;
    std::cout << "[ window " << window << " ] max relative error vs finite differences: dq " << eq << ", dk " << ek
              << ", dv " << ev << "\n";
  }
}

TEST(AttentionWindow, Float32BackwardAgreesWithFloat64) {
  Problem p64 = make_problem({300, 20}, 4, 2, 32, DType::kFloat64, 27);
  Problem p32{converted(p64.q, DType::kFloat32), converted(p64.k, DType::kFloat32),
              converted(p64.v, DType::kFloat32), p64.cu};
  Tensor w64 = random_tensor(p64.q.shape(), DType::kFloat64, 28);
  const AttentionOptions o{.window = 50};
  Grads g64 = run_bwd(p64, run_fwd(p64, o), w64, o);
  Grads g32 = run_bwd(p32, run_fwd(p32, o), converted(w64, DType::kFloat32), o);
  EXPECT_LT(max_relative_error(g32.dq, g64.dq), 2e-5);
  EXPECT_LT(max_relative_error(g32.dk, g64.dk), 2e-5);
  EXPECT_LT(max_relative_error(g32.dv, g64.dv), 2e-5);
}

TEST(AttentionWindow, PackedSequencesEqualEachAloneAndThreadsDoNotMatter) {
  const std::vector<int64_t> lens{5, 170, 1, 64};
  Problem p = make_problem(lens, 4, 2, 16, DType::kFloat32, 29);
  Tensor dout = random_tensor(p.q.shape(), DType::kFloat32, 30);
  const AttentionOptions o{.window = 33};
  const int saved = num_threads();
  set_num_threads(1);
  Forward f1 = run_fwd(p, o);
  Grads g1 = run_bwd(p, f1, dout, o);
  set_num_threads(2);
  Forward f = run_fwd(p, o);
  Grads g = run_bwd(p, f, dout, o);
  set_num_threads(saved);
  EXPECT_TRUE(bitwise_equal(f1.out, f.out, "out, 1 vs 2 threads"));
  EXPECT_TRUE(bitwise_equal(g1.dk, g.dk, "dk, 1 vs 2 threads"));
  int64_t start = 0;
  for (int64_t len : lens) {
    Problem one{p.q.narrow(0, start, len), p.k.narrow(0, start, len), p.v.narrow(0, start, len),
                Tensor::from_vector<int32_t>({2}, {0, static_cast<int32_t>(len)})};
    Forward fo = run_fwd(one, o);
    Grads go = run_bwd(one, fo, dout.narrow(0, start, len), o);
    const std::string what = " of the sequence at " + std::to_string(start);
    EXPECT_TRUE(bitwise_equal(fo.out, f.out.narrow(0, start, len), "out" + what));
    EXPECT_TRUE(bitwise_equal(go.dq, g.dq.narrow(0, start, len), "dq" + what));
    EXPECT_TRUE(bitwise_equal(go.dk, g.dk.narrow(0, start, len), "dk" + what));
    EXPECT_TRUE(bitwise_equal(go.dv, g.dv.narrow(0, start, len), "dv" + what));
    start += len;
  }
}

// bf16 operands round q, k, v, dout as the tiles copy them: inputs that are bf16 values already give
// bitwise the results of the plain float32 kernel.
TEST(AttentionWindow, Bf16OperandsRoundTheInputs) {
  Problem p = make_problem({130, 40}, 4, 2, 16, DType::kFloat32, 31);
  Problem r{bf16_values(p.q), bf16_values(p.k), bf16_values(p.v), p.cu};
  Tensor dout = random_tensor(p.q.shape(), DType::kFloat32, 32);
  Tensor dout_r = bf16_values(dout);
  const AttentionOptions plain{.window = 20}, bf16{.bf16_operands = true, .window = 20};
  Forward fb = run_fwd(p, bf16), fr = run_fwd(r, plain);
  EXPECT_TRUE(bitwise_equal(fb.out, fr.out, "out"));
  Grads gb = run_bwd(p, fb, dout, bf16), gr = run_bwd(r, fr, dout_r, plain);
  EXPECT_TRUE(bitwise_equal(gb.dq, gr.dq, "dq"));
  EXPECT_TRUE(bitwise_equal(gb.dk, gr.dk, "dk"));
  EXPECT_TRUE(bitwise_equal(gb.dv, gr.dv, "dv"));
}

TEST(AttentionWindow, NegativeWindowIsAnError) {
  Problem p = make_problem({3}, 2, 2, 4, DType::kFloat32, 33);
  EXPECT_THAT([&] { run_fwd(p, {.window = -1}); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("attention_fwd: window -1 must be >= 0")));
}

TEST(Attention, VectorizedExpIsAccurate) {
  double worst = 0;
  for (double x = -87.0; x <= 88.0; x += 0.01237) {
    const float fx = static_cast<float>(x);
    const double exact = std::exp(static_cast<double>(fx));
    worst = std::max(worst, std::abs(cpu::exp_approx(fx) - exact) / exact);
  }
  EXPECT_LT(worst, 3e-7);  // about 2.5 float ulps
  EXPECT_GT(cpu::exp_approx(-1000.0f), 0.0f);
  EXPECT_LT(cpu::exp_approx(-1000.0f), 1e-37f);
}

}  // namespace
}  // namespace hspmd::kernels
