// SIMD levels (kernels/simd.h): every level the CPU supports is selected in turn and each kernel
// with a SIMD float32 path gives the results of the scalar level (to float rounding) and of the
// float64 kernel. Levels the CPU lacks are skipped, not faked. HSPMD_SIMD is tested by ctest runs
// of this program with the variable set (CMakeLists.txt).
#include "hspmd/kernels/simd.h"

#include <gmock/gmock.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "hspmd/core/bfloat16.h"
#include "hspmd/core/error.h"
#include "hspmd/kernels/adamw.h"
#include "hspmd/kernels/attention.h"
#include "hspmd/kernels/cast.h"
#include "hspmd/kernels/cpu/simd/row_ops.h"
#include "hspmd/kernels/cross_entropy.h"
#include "hspmd/kernels/elementwise.h"
#include "hspmd/kernels/rms_norm.h"
#include "kernel_testlib.h"

namespace hspmd::kernels {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using hspmd::testing::all_close;
using hspmd::testing::random_ints;
using hspmd::testing::random_tensor;

const SimdLevel kLevels[] = {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512};

// Restores the level in use when a test ends.
class SimdLevelTest : public ::testing::TestWithParam<SimdLevel> {
 protected:
  void SetUp() override {
    if (!simd_level_supported(GetParam())) GTEST_SKIP() << "this CPU lacks " << simd_level_name(GetParam());
  }
  void TearDown() override { set_simd_level(saved_); }

  // Runs f at the scalar level and at the tested one; returns {scalar outputs, tested outputs}.
  std::pair<std::vector<Tensor>, std::vector<Tensor>> both(const std::function<std::vector<Tensor>()>& f) {
    set_simd_level(SimdLevel::kScalar);
    std::vector<Tensor> scalar = f();
    set_simd_level(GetParam());
    std::vector<Tensor> tested = f();
    return {scalar, tested};
  }

  void expect_close(const std::function<std::vector<Tensor>()>& f, double rtol, double atol, const std::string& what) {
    auto [scalar, tested] = both(f);
    ASSERT_EQ(scalar.size(), tested.size());
    for (size_t i = 0; i < scalar.size(); ++i) {
      EXPECT_TRUE(all_close(tested[i], scalar[i], rtol, atol, what + " output " + std::to_string(i)));
    }
  }

 private:
  SimdLevel saved_ = simd_level();
};

// A copy of t in dtype (a clone when the dtype is t's, so a kernel never writes its input).
Tensor as(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t.clone();
  Tensor out = Tensor::empty(t.shape(), dtype);
  cast(t, out);
  return out;
}

Tensor to64(const Tensor& t) { return as(t, DType::kFloat64); }

// Lengths that exercise full vectors of 1, 8 and 16 lanes and every kind of tail.
const int64_t kLengths[] = {1, 7, 8, 15, 16, 17, 33, 100, 1000};

TEST_P(SimdLevelTest, TableIsTheSelectedLevel) {
  set_simd_level(GetParam());
  EXPECT_EQ(simd_level(), GetParam());
  EXPECT_EQ(cpu::row_ops().level, GetParam());
}

TEST_P(SimdLevelTest, RowLoopsMatchDoubleReferences) {
  set_simd_level(GetParam());
  const cpu::RowOps& ops = cpu::row_ops();
  for (int64_t n : kLengths) {
    Tensor x = random_tensor({n}, DType::kFloat32, 10 + n, -20.0, 20.0);
    const float* px = x.data<float>();
    double max = -INFINITY;
    for (int64_t i = 0; i < n; ++i) max = std::max(max, static_cast<double>(px[i]));
    EXPECT_EQ(ops.row_max(px, n), static_cast<float>(max)) << "n " << n;

    double sum = 0;
    std::vector<double> expect(static_cast<size_t>(n));
    // The shift is subtracted in float, as the kernels do; only the exponential is compared.
    for (int64_t i = 0; i < n; ++i) sum += expect[i] = std::exp(static_cast<double>(px[i] - static_cast<float>(max)));
    EXPECT_NEAR(ops.exp_shift_sum_f64(px, n, static_cast<float>(max)), sum, 1e-6 * sum) << "n " << n;
    std::vector<float> scaled(static_cast<size_t>(n));
    ops.exp_shift_scale(px, n, static_cast<float>(max), 0.5f, scaled.data());
    std::vector<float> y(px, px + n);
    EXPECT_NEAR(ops.exp_shift_sum(y.data(), n, static_cast<float>(max)), sum, 1e-6 * sum) << "n " << n;
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(y[i], expect[i], 4e-7 * expect[i] + 1e-37) << "n " << n << " i " << i;
      EXPECT_NEAR(scaled[i], 0.5 * expect[i], 4e-7 * expect[i] + 1e-37) << "n " << n << " i " << i;
    }
  }
}

TEST_P(SimdLevelTest, AttentionMatchesScalarAndFloat64) {
  // Two packed sequences (one ends mid-block) with grouped-query heads: tails of every row loop.
  Tensor q = random_tensor({150, 4, 16}, DType::kFloat32, 1), k = random_tensor({150, 2, 16}, DType::kFloat32, 2);
  Tensor v = random_tensor({150, 2, 16}, DType::kFloat32, 3), dout = random_tensor({150, 4, 16}, DType::kFloat32, 4);
  Tensor cu = Tensor::from_vector<int64_t>({3}, {0, 71, 150});
  auto run = [&](DType dtype) {
    Tensor qd = as(q, dtype), kd = as(k, dtype), vd = as(v, dtype), dd = as(dout, dtype);
    Tensor out = Tensor::empty(q.shape(), dtype), lse = Tensor::empty({4, 150}, dtype);
    Tensor dq = Tensor::empty(q.shape(), dtype), dk = Tensor::empty(k.shape(), dtype);
    Tensor dv = Tensor::empty(k.shape(), dtype);
    attention_fwd(qd, kd, vd, cu, out, lse);
    attention_bwd(qd, kd, vd, cu, out, lse, dd, dq, dk, dv);
    return std::vector<Tensor>{out, lse, dq, dk, dv};
  };
  expect_close([&] { return run(DType::kFloat32); }, 1e-5, 1e-5, "attention");
  set_simd_level(GetParam());
  std::vector<Tensor> f32 = run(DType::kFloat32), f64 = run(DType::kFloat64);
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_TRUE(all_close(to64(f32[i]), f64[i], 1e-4, 1e-5, "attention vs f64"));
}

TEST_P(SimdLevelTest, RmsNormMatchesScalarAndFloat64) {
  Tensor x = random_tensor({9, 37}, DType::kFloat32, 5), w = random_tensor({37}, DType::kFloat32, 6);
  Tensor dy = random_tensor({9, 37}, DType::kFloat32, 7);
  auto run = [&](DType dtype) {
    Tensor xd = as(x, dtype), wd = as(w, dtype), dyd = as(dy, dtype);
    Tensor y = Tensor::empty(x.shape(), dtype), rstd = Tensor::empty({9}, dtype);
    Tensor dx = Tensor::empty(x.shape(), dtype), dw = Tensor::empty(w.shape(), dtype);
    rms_norm_fwd(xd, wd, 1e-5, y, rstd);
    rms_norm_bwd(xd, wd, rstd, dyd, dx, dw);
    return std::vector<Tensor>{y, rstd, dx, dw};
  };
  expect_close([&] { return run(DType::kFloat32); }, 1e-6, 1e-6, "rms_norm");
  set_simd_level(GetParam());
  std::vector<Tensor> f32 = run(DType::kFloat32), f64 = run(DType::kFloat64);
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_TRUE(all_close(to64(f32[i]), f64[i], 1e-5, 1e-6, "rms_norm vs f64"));
}

TEST_P(SimdLevelTest, SwigluMatchesScalarAndFloat64) {
  // Large enough to be split over threads, with a tail; gates reach the clamped exp range.
  Tensor g = random_tensor({3, 5001}, DType::kFloat32, 8, -100.0, 100.0);
  Tensor u = random_tensor({3, 5001}, DType::kFloat32, 9);
  Tensor dy = random_tensor({3, 5001}, DType::kFloat32, 10);
  auto run = [&](DType dtype) {
    Tensor gd = as(g, dtype), ud = as(u, dtype), dyd = as(dy, dtype);
    Tensor y = Tensor::empty(g.shape(), dtype), dg = Tensor::empty(g.shape(), dtype);
    Tensor du = Tensor::empty(g.shape(), dtype);
    swiglu_fwd(gd, ud, y);
    swiglu_bwd(gd, ud, dyd, dg, du);
    return std::vector<Tensor>{y, dg, du};
  };
  expect_close([&] { return run(DType::kFloat32); }, 1e-6, 1e-6, "swiglu");
  set_simd_level(GetParam());
  std::vector<Tensor> f32 = run(DType::kFloat32), f64 = run(DType::kFloat64);
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_TRUE(all_close(to64(f32[i]), f64[i], 1e-5, 1e-6, "swiglu vs f64"));
}

TEST_P(SimdLevelTest, CrossEntropyMatchesScalarAndFloat64) {
  Tensor logits = random_tensor({6, 1003}, DType::kFloat32, 11, -8.0, 8.0);
  Tensor targets = random_ints({6}, DType::kInt64, 12, 0, 1003);
  Tensor dlosses = random_tensor({6}, DType::kFloat32, 13);
  auto run = [&](DType dtype) {
    Tensor ld = as(logits, dtype), dl = as(dlosses, dtype);
    Tensor losses = Tensor::empty({6}, dtype), lse = Tensor::empty({6}, dtype);
    Tensor dlogits = Tensor::empty(logits.shape(), dtype);
    cross_entropy_fwd(ld, targets, losses, lse);
    cross_entropy_bwd(ld, targets, lse, dl, dlogits);
    return std::vector<Tensor>{losses, lse, dlogits};
  };
  expect_close([&] { return run(DType::kFloat32); }, 1e-6, 1e-7, "cross_entropy");
  set_simd_level(GetParam());
  std::vector<Tensor> f32 = run(DType::kFloat32), f64 = run(DType::kFloat64);
  for (size_t i = 0; i < f32.size(); ++i) {
    EXPECT_TRUE(all_close(to64(f32[i]), f64[i], 1e-5, 1e-7, "cross_entropy vs f64"));
  }
}

TEST_P(SimdLevelTest, SlidingWindowAttentionMatchesScalarAndFloat64) {
  // Windows mask both ends of a row, at every offset from the vector lanes.
  Tensor q = random_tensor({150, 4, 16}, DType::kFloat32, 21), k = random_tensor({150, 2, 16}, DType::kFloat32, 22);
  Tensor v = random_tensor({150, 2, 16}, DType::kFloat32, 23), dout = random_tensor({150, 4, 16}, DType::kFloat32, 24);
  Tensor cu = Tensor::from_vector<int64_t>({3}, {0, 71, 150});
  auto run = [&](DType dtype) {
    Tensor qd = as(q, dtype), kd = as(k, dtype), vd = as(v, dtype), dd = as(dout, dtype);
    Tensor out = Tensor::empty(q.shape(), dtype), lse = Tensor::empty({4, 150}, dtype);
    Tensor dq = Tensor::empty(q.shape(), dtype), dk = Tensor::empty(k.shape(), dtype);
    Tensor dv = Tensor::empty(k.shape(), dtype);
    attention_fwd(qd, kd, vd, cu, out, lse, {.window = 37});
    attention_bwd(qd, kd, vd, cu, out, lse, dd, dq, dk, dv, {.window = 37});
    return std::vector<Tensor>{out, lse, dq, dk, dv};
  };
  expect_close([&] { return run(DType::kFloat32); }, 1e-5, 1e-5, "windowed attention");
  set_simd_level(GetParam());
  std::vector<Tensor> f32 = run(DType::kFloat32), f64 = run(DType::kFloat64);
  for (size_t i = 0; i < f32.size(); ++i) {
    EXPECT_TRUE(all_close(to64(f32[i]), f64[i], 1e-4, 1e-5, "windowed attention vs f64"));
  }
}

TEST_P(SimdLevelTest, GegluMatchesScalarAndFloat64) {
  // As SwiGLU's: split over threads, with a tail; gates reach the clamped exp range.
  Tensor g = random_tensor({3, 5001}, DType::kFloat32, 25, -30.0, 30.0);
  Tensor u = random_tensor({3, 5001}, DType::kFloat32, 26);
  Tensor dy = random_tensor({3, 5001}, DType::kFloat32, 27);
  auto run = [&](DType dtype) {
    Tensor gd = as(g, dtype), ud = as(u, dtype), dyd = as(dy, dtype);
    Tensor y = Tensor::empty(g.shape(), dtype), dg = Tensor::empty(g.shape(), dtype);
    Tensor du = Tensor::empty(g.shape(), dtype);
    geglu_tanh_fwd(gd, ud, y);
    geglu_tanh_bwd(gd, ud, dyd, dg, du);
    return std::vector<Tensor>{y, dg, du};
  };
  expect_close([&] { return run(DType::kFloat32); }, 1e-6, 1e-6, "geglu_tanh");
  set_simd_level(GetParam());
  std::vector<Tensor> f32 = run(DType::kFloat32), f64 = run(DType::kFloat64);
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_TRUE(all_close(to64(f32[i]), f64[i], 1e-5, 1e-6, "geglu_tanh vs f64"));
}

// cap tanh(x / cap) keeps its relative accuracy near 0 too (where 2 sigmoid(2z) - 1 would not).
TEST_P(SimdLevelTest, SoftcapIsRelativelyAccurateEverywhere) {
  set_simd_level(GetParam());
  std::vector<float> x;
  for (double v = -200; v <= 200; v += 0.0371) x.push_back(static_cast<float>(v));
  for (double v = 1e-6; v < 1; v *= 1.7) x.push_back(static_cast<float>(v));
  std::vector<float> y = x;
  cpu::row_ops().softcap(y.data(), static_cast<int64_t>(y.size()), 30.0f);
  for (size_t i = 0; i < x.size(); ++i) {
    const double exact = 30.0 * std::tanh(static_cast<double>(x[i]) / 30.0);
    ASSERT_NEAR(y[i], exact, 1e-6 * std::abs(exact) + 1e-30) << "x " << x[i];
  }
}

TEST_P(SimdLevelTest, SoftCappedCrossEntropyMatchesScalarAndFloat64) {
  Tensor logits = random_tensor({6, 1003}, DType::kFloat32, 28, -60.0, 60.0);
  Tensor targets = random_ints({6}, DType::kInt64, 29, 0, 1003);
  Tensor dlosses = random_tensor({6}, DType::kFloat32, 30);
  const CrossEntropyOptions o{.softcap = 30.0};
  auto run = [&](DType dtype) {
    Tensor ld = as(logits, dtype), dl = as(dlosses, dtype);
    Tensor losses = Tensor::empty({6}, dtype), lse = Tensor::empty({6}, dtype);
    Tensor dlogits = Tensor::empty(logits.shape(), dtype);
    cross_entropy_fwd(ld, targets, losses, lse, o);
    cross_entropy_bwd(ld, targets, lse, dl, dlogits, o);
    return std::vector<Tensor>{losses, lse, dlogits};
  };
  expect_close([&] { return run(DType::kFloat32); }, 1e-5, 1e-7, "soft-capped cross_entropy");
  set_simd_level(GetParam());
  std::vector<Tensor> f32 = run(DType::kFloat32), f64 = run(DType::kFloat64);
  for (size_t i = 0; i < f32.size(); ++i) {
    EXPECT_TRUE(all_close(to64(f32[i]), f64[i], 1e-5, 1e-7, "soft-capped cross_entropy vs f64"));
  }
}

TEST_P(SimdLevelTest, AdamwMatchesScalarAndFloat64) {
  Tensor p0 = random_tensor({10007}, DType::kFloat32, 14), g = random_tensor({10007}, DType::kFloat32, 15);
  Tensor m0 = random_tensor({10007}, DType::kFloat32, 16), v0 = random_tensor({10007}, DType::kFloat32, 17, 0.0, 1.0);
  auto run = [&](DType dtype) {
    Tensor p = as(p0, dtype), m = as(m0, dtype), v = as(v0, dtype), gd = as(g, dtype);
    adamw_step(p, gd, m, v, 3, {.lr = 1e-2, .weight_decay = 0.1, .grad_scale = 0.6});
    return std::vector<Tensor>{p, m, v};
  };
  expect_close([&] { return run(DType::kFloat32); }, 1e-6, 1e-7, "adamw");
  set_simd_level(GetParam());
  std::vector<Tensor> f32 = run(DType::kFloat32), f64 = run(DType::kFloat64);
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_TRUE(all_close(to64(f32[i]), f64[i], 1e-5, 1e-6, "adamw vs f64"));
}

// Integer arithmetic on the bits: every level gives core/bfloat16.h's conversion exactly, on ties,
// NaNs, infinities, denormals and every tail length.
TEST_P(SimdLevelTest, Bfloat16RoundingEqualsTheScalarConversionBitwise) {
  set_simd_level(GetParam());
  const cpu::RowOps& ops = cpu::row_ops();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values = {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::quiet_NaN(),
                               std::bit_cast<float>(0x7f800001u), std::bit_cast<float>(0xff800001u),
                               1.0f + 0x1p-8f, 1.0f + 0x1p-7f + 0x1p-8f, -(1.0f + 0x1p-8f + 0x1p-20f)};
  Tensor noise = random_tensor({1000}, DType::kFloat32, 18, -3e4, 3e4);
  for (int64_t i = 0; i < noise.numel(); ++i) values.push_back(noise.data<float>()[i]);
  for (int64_t n : kLengths) {
    for (int64_t offset : {int64_t{0}, int64_t{5}}) {  // a vector that straddles the edge cases
      const float* x = values.data() + offset;
      std::vector<float> rounded(static_cast<size_t>(n));
      std::vector<uint16_t> bits(static_cast<size_t>(n));
      ops.round_to_bfloat16(x, rounded.data(), n);
      ops.to_bfloat16(x, bits.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t expect = BFloat16(x[i]).bits;
        EXPECT_EQ(bits[i], expect) << "n " << n << " i " << i << " x " << x[i];
        EXPECT_EQ(std::bit_cast<uint32_t>(rounded[i]), static_cast<uint32_t>(expect) << 16) << "n " << n << " i " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, SimdLevelTest, ::testing::ValuesIn(kLevels),
                         [](const ::testing::TestParamInfo<SimdLevel>& info) {
                           return std::string(simd_level_name(info.param));
                         });

TEST(SimdLevel, NamesRoundTripAndUnknownNamesAreRejected) {
  for (SimdLevel level : kLevels) EXPECT_EQ(parse_simd_level(simd_level_name(level)), level);
  EXPECT_THAT([] { parse_simd_level("sse9"); }, ThrowsMessage<Error>(HasSubstr("unknown SIMD level 'sse9'")));
}

TEST(SimdLevel, BestIsSupportedAndScalarAlwaysIs) {
  EXPECT_TRUE(simd_level_supported(SimdLevel::kScalar));
  EXPECT_TRUE(simd_level_supported(best_simd_level()));
  if (!simd_level_supported(SimdLevel::kAvx512)) {
    EXPECT_THAT([] { set_simd_level(SimdLevel::kAvx512); },
                ThrowsMessage<Error>(HasSubstr("this CPU does not support avx512")));
  }
}

// The level in use at start is HSPMD_SIMD's when set (ctest runs this program with it set to each
// supported level), else the best one.
TEST(SimdLevel, EnvironmentSelectsTheStartingLevel) {
  const char* forced = std::getenv("HSPMD_SIMD");
  if (forced == nullptr) {
    EXPECT_EQ(simd_level(), best_simd_level());
  } else if (simd_level_supported(parse_simd_level(forced))) {
    EXPECT_EQ(simd_level_name(simd_level()), std::string(forced));
    EXPECT_EQ(cpu::row_ops().level, simd_level());
  } else {
    // Forcing a level the CPU lacks is an error, not a crash on the first wide instruction.
    EXPECT_THAT([] { simd_level(); }, ThrowsMessage<Error>(HasSubstr("this CPU does not support")));
  }
}

}  // namespace
}  // namespace hspmd::kernels
