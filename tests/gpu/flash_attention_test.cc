// The flash attention kernel (kernels/cuda/flash_attention.h) against the CPU kernel and against
// the reference CUDA kernel, forward and backward, bf16 storage: packed sequences of odd lengths
// (1, 17, 130 and 257 tokens: tiles that straddle sequences, partial last tiles), grouped-query
// ratios 1 and 4, head dims 64 and 128, without and with a sliding window; and the dispatch of
// attention_fwd / attention_bwd (flash by default, the reference under HSPMD_CUDA_ATTENTION).
#include "hspmd/kernels/cuda/flash_attention.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <tuple>

#include "gpu/gpu_testlib.h"
#include "hspmd/kernels/attention.h"
#include "hspmd/kernels/cuda/attention_choice.h"

namespace hspmd::kernels::cuda {
namespace {

using namespace hspmd::testing;

constexpr int64_t kTokens = 405;  // sequences of 1, 17, 130 and 257 tokens

Tensor offsets() { return Tensor::from_vector<int64_t>({5}, {0, 1, 18, 148, 405}); }

// The inputs rounded to bf16 (float32 host copies), the CPU kernel's outputs, and the device copies.
struct Case {
  int64_t head_dim, q_heads, kv_heads, window;
  Tensor q, k, v, dout;
  AttentionShape shape() const {
    return {.tokens = kTokens,
            .q_heads = q_heads,
            .kv_heads = kv_heads,
            .head_dim = head_dim,
            .sequences = 4,
            .scale = 0.0,
            .window = window};
  }
};

struct DeviceResult {
  Tensor out, lse, dq, dk, dv;
};

class FlashAttention : public GpuTest, public ::testing::WithParamInterface<std::tuple<int64_t, int64_t, int64_t>> {
 protected:
  Case make_case() {
    const auto [head_dim, group, window] = GetParam();
    const int64_t kv_heads = 2, q_heads = kv_heads * group;
    auto rounded = [](Tensor t) { return to_f32(to_bf16(t)); };
    return Case{head_dim,
                q_heads,
                kv_heads,
                window,
                rounded(random_tensor({kTokens, q_heads, head_dim}, DType::kFloat32, 201)),
                rounded(random_tensor({kTokens, kv_heads, head_dim}, DType::kFloat32, 202)),
                rounded(random_tensor({kTokens, kv_heads, head_dim}, DType::kFloat32, 203)),
                rounded(random_tensor({kTokens, q_heads, head_dim}, DType::kFloat32, 204))};
  }

  // Runs fwd then bwd (the backward on the forward's own out and lse) on device copies.
  template <typename Fwd, typename Bwd>
  DeviceResult run(const Case& c, Fwd fwd, Bwd bwd) {
    auto gq = upload(to_bf16(c.q)), gk = upload(to_bf16(c.k)), gv = upload(to_bf16(c.v)),
         gdout = upload(to_bf16(c.dout)), gcu = upload(offsets());
    auto gout = device_empty(c.q.shape(), DType::kBFloat16), glse = device_empty({c.q_heads, kTokens}, DType::kFloat32);
    auto gdq = device_empty(c.q.shape(), DType::kFloat32), gdk = device_empty(c.k.shape(), DType::kFloat32),
         gdv = device_empty(c.v.shape(), DType::kFloat32);
    fwd(gq.data(), gk.data(), gv.data(), DType::kInt64, gcu.data(), gout.data(), glse.as<float>(), c.shape(),
        stream_.get());
    bwd(gq.data(), gk.data(), gv.data(), DType::kInt64, gcu.data(), gout.data(), glse.as<float>(), gdout.data(),
        gdq.as<float>(), gdk.as<float>(), gdv.as<float>(), c.shape(), stream_.get());
    return {to_f32(download(gout, c.q.shape(), DType::kBFloat16)),
            download(glse, {c.q_heads, kTokens}, DType::kFloat32), download(gdq, c.q.shape(), DType::kFloat32),
            download(gdk, c.k.shape(), DType::kFloat32), download(gdv, c.v.shape(), DType::kFloat32)};
  }

  DeviceResult run_flash(const Case& c) { return run(c, flash_attention_fwd, flash_attention_bwd); }
  DeviceResult run_reference(const Case& c) {
    auto fwd = [](const void* q, const void* k, const void* v, DType cd, const void* cu, void* out, float* lse,
                  const AttentionShape& s,
                  cudaStream_t st) { reference_attention_fwd(DType::kBFloat16, q, k, v, cd, cu, out, lse, s, st); };
    auto bwd = [](const void* q, const void* k, const void* v, DType cd, const void* cu, const void* out,
                  const float* lse, const void* dout, float* dq, float* dk, float* dv, const AttentionShape& s,
                  cudaStream_t st) {
      reference_attention_bwd(DType::kBFloat16, q, k, v, cd, cu, out, lse, dout, dq, dk, dv, s, st);
    };
    return run(c, fwd, bwd);
  }
  DeviceResult run_dispatched(const Case& c) {
    auto fwd = [](const void* q, const void* k, const void* v, DType cd, const void* cu, void* out, float* lse,
                  const AttentionShape& s,
                  cudaStream_t st) { attention_fwd(DType::kBFloat16, q, k, v, cd, cu, out, lse, s, st); };
    auto bwd = [](const void* q, const void* k, const void* v, DType cd, const void* cu, const void* out,
                  const float* lse, const void* dout, float* dq, float* dk, float* dv, const AttentionShape& s,
                  cudaStream_t st) {
      attention_bwd(DType::kBFloat16, q, k, v, cd, cu, out, lse, dout, dq, dk, dv, s, st);
    };
    return run(c, fwd, bwd);
  }
};

// Both device results within bf16 tolerance of `expected` (lse tighter: computed from float scores).
void expect_close(const DeviceResult& got, const DeviceResult& expected, const std::string& what) {
  EXPECT_TRUE(all_close(got.out, expected.out, kBFloat16Rtol, kBFloat16Atol, "out " + what));
  EXPECT_TRUE(all_close(got.lse, expected.lse, 1e-4, 1e-4, "lse " + what));
  EXPECT_TRUE(all_close(got.dq, expected.dq, kBFloat16Rtol, kBFloat16Atol, "dq " + what));
  EXPECT_TRUE(all_close(got.dk, expected.dk, kBFloat16Rtol, kBFloat16Atol, "dk " + what));
  EXPECT_TRUE(all_close(got.dv, expected.dv, kBFloat16Rtol, kBFloat16Atol, "dv " + what));
}

TEST_P(FlashAttention, MatchesTheCpuAndTheReferenceKernel) {
  const Case c = make_case();
  DeviceResult cpu{Tensor::empty(c.q.shape(), DType::kFloat32), Tensor::empty({c.q_heads, kTokens}, DType::kFloat32),
                   Tensor::empty(c.q.shape(), DType::kFloat32), Tensor::empty(c.k.shape(), DType::kFloat32),
                   Tensor::empty(c.v.shape(), DType::kFloat32)};
  kernels::attention_fwd(c.q, c.k, c.v, offsets(), cpu.out, cpu.lse, {.window = c.window});
  // The device backward reads its stored bf16 out (delta = sum(dout * out)): so does this one.
  const Tensor out_bf16 = to_f32(to_bf16(cpu.out));
  kernels::attention_bwd(c.q, c.k, c.v, offsets(), out_bf16, cpu.lse, c.dout, cpu.dq, cpu.dk, cpu.dv,
                         {.window = c.window});
  cpu.out = out_bf16;

  const DeviceResult flash = run_flash(c);
  expect_close(flash, cpu, "flash vs cpu");
  expect_close(flash, run_reference(c), "flash vs reference");
  // Deterministic: no atomics anywhere in the flash kernel.
  const DeviceResult again = run_flash(c);
  EXPECT_TRUE(all_close(again.dk, flash.dk, 0.0, 0.0, "dk run to run"));
  EXPECT_TRUE(all_close(again.dq, flash.dq, 0.0, 0.0, "dq run to run"));
}

TEST_P(FlashAttention, DispatchRunsFlashByDefaultAndTheReferenceWhenAsked) {
  const Case c = make_case();
  ASSERT_EQ(unsetenv("HSPMD_CUDA_ATTENTION"), 0);
  const DeviceResult flash = run_flash(c), dispatched = run_dispatched(c);
  EXPECT_TRUE(all_close(dispatched.out, flash.out, 0.0, 0.0, "default dispatch out"));
  EXPECT_TRUE(all_close(dispatched.dk, flash.dk, 0.0, 0.0, "default dispatch dk"));
  ASSERT_EQ(setenv("HSPMD_CUDA_ATTENTION", "reference", 1), 0);
  const DeviceResult forced = run_dispatched(c);
  ASSERT_EQ(unsetenv("HSPMD_CUDA_ATTENTION"), 0);
  const DeviceResult reference = run_reference(c);
  EXPECT_TRUE(all_close(forced.out, reference.out, 0.0, 0.0, "forced reference out"));
  EXPECT_TRUE(all_close(forced.lse, reference.lse, 0.0, 0.0, "forced reference lse"));
}

INSTANTIATE_TEST_SUITE_P(Cases, FlashAttention,
                         ::testing::Combine(::testing::Values(int64_t{64}, int64_t{128}),
                                            ::testing::Values(int64_t{1}, int64_t{4}),
                                            ::testing::Values(int64_t{0}, int64_t{40})),
                         [](const auto& info) {
                           return "d" + std::to_string(std::get<0>(info.param)) + "_group" +
                                  std::to_string(std::get<1>(info.param)) + "_window" +
                                  std::to_string(std::get<2>(info.param));
                         });

TEST_F(GpuTest, FlashAttentionRefusesHeadDimsItDoesNotTile) {
  const AttentionShape shape{.tokens = 1, .q_heads = 1, .kv_heads = 1, .head_dim = 96, .sequences = 1};
  EXPECT_THROW(
      flash_attention_fwd(nullptr, nullptr, nullptr, DType::kInt64, nullptr, nullptr, nullptr, shape, stream_.get()),
      Error);
}

}  // namespace
}  // namespace hspmd::kernels::cuda
