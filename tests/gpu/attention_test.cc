// The reference CUDA attention (reference_attention_fwd / _bwd) against the CPU kernel
// (kernels/attention.h), forward and backward: packed sequences of 5, 1 and 140 tokens (several key
// chunks), grouped-query heads, head dimensions below and above the block size, float32 and
// bfloat16, int32 and int64 offsets, without and with a sliding window.
#include "hspmd/kernels/cuda/attention.h"

#include <gtest/gtest.h>

#include <string>

#include "gpu/gpu_testlib.h"
#include "hspmd/kernels/attention.h"

namespace hspmd::kernels::cuda {
namespace {

using namespace hspmd::testing;

class CudaAttention : public GpuTest, public ::testing::WithParamInterface<std::tuple<DType, int64_t, DType>> {};

TEST_P(CudaAttention, ForwardAndBackwardMatchTheCpu) {
  const auto [dtype, head_dim, offsets_dtype] = GetParam();
  const bool bf16 = dtype == DType::kBFloat16;
  const int64_t tokens = 146, q_heads = 4, kv_heads = 2;
  Tensor cu = Tensor::from_vector<int64_t>({4}, {0, 5, 6, 146});
  if (offsets_dtype == DType::kInt32) cu = Tensor::from_vector<int32_t>({4}, {0, 5, 6, 146});
  auto rounded = [&](Tensor t) { return bf16 ? to_f32(to_bf16(t)) : t; };
  Tensor q = rounded(random_tensor({tokens, q_heads, head_dim}, DType::kFloat32, 101));
  Tensor k = rounded(random_tensor({tokens, kv_heads, head_dim}, DType::kFloat32, 102));
  Tensor v = rounded(random_tensor({tokens, kv_heads, head_dim}, DType::kFloat32, 103));
  Tensor dout = rounded(random_tensor({tokens, q_heads, head_dim}, DType::kFloat32, 104));
  for (int64_t window : {0, 37}) {  // plain causal, and a window shorter than the long sequence
    Tensor out = Tensor::empty(q.shape(), DType::kFloat32), lse = Tensor::empty({q_heads, tokens}, DType::kFloat32);
    Tensor dq = Tensor::empty(q.shape(), DType::kFloat32), dk = Tensor::empty(k.shape(), DType::kFloat32),
           dv = Tensor::empty(v.shape(), DType::kFloat32);
    kernels::attention_fwd(q, k, v, cu, out, lse, {.window = window});
    kernels::attention_bwd(q, k, v, cu, out, lse, dout, dq, dk, dv, {.window = window});

    auto in = [&](const Tensor& t) { return upload(bf16 ? to_bf16(t) : t); };
    auto gq = in(q), gk = in(k), gv = in(v), gdout = in(dout), gcu = upload(cu);
    auto gout = device_empty(q.shape(), dtype), glse = device_empty({q_heads, tokens}, DType::kFloat32);
    auto gdq = device_empty(q.shape(), DType::kFloat32), gdk = device_empty(k.shape(), DType::kFloat32),
         gdv = device_empty(v.shape(), DType::kFloat32);
    const AttentionShape shape{.tokens = tokens, .q_heads = q_heads, .kv_heads = kv_heads, .head_dim = head_dim,
                               .sequences = 3, .scale = 0.0, .window = window};
    reference_attention_fwd(dtype, gq.data(), gk.data(), gv.data(), offsets_dtype, gcu.data(), gout.data(),
                            glse.as<float>(), shape, stream_.get());
    reference_attention_bwd(dtype, gq.data(), gk.data(), gv.data(), offsets_dtype, gcu.data(), gout.data(),
                            glse.as<float>(), gdout.data(), gdq.as<float>(), gdk.as<float>(), gdv.as<float>(), shape,
                            stream_.get());
    const double rtol = bf16 ? kBFloat16Rtol : 1e-5, atol = bf16 ? kBFloat16Atol : 1e-5;
    const std::string what = ", window " + std::to_string(window);
    EXPECT_TRUE(all_close(to_f32(download(gout, q.shape(), dtype)), out, rtol, atol, "out" + what));
    EXPECT_TRUE(all_close(download(glse, {q_heads, tokens}, DType::kFloat32), lse, 1e-5, 1e-5, "lse" + what));
    // The backward's delta = sum(dout * out) reads the stored out: rounded to bf16 under bf16.
    EXPECT_TRUE(all_close(download(gdq, q.shape(), DType::kFloat32), dq, rtol, atol, "dq" + what));
    EXPECT_TRUE(all_close(download(gdk, k.shape(), DType::kFloat32), dk, rtol, atol, "dk" + what));
    EXPECT_TRUE(all_close(download(gdv, v.shape(), DType::kFloat32), dv, rtol, atol, "dv" + what));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaAttention,
                         ::testing::Values(std::make_tuple(DType::kFloat32, int64_t{40}, DType::kInt64),
                                           std::make_tuple(DType::kFloat32, int64_t{160}, DType::kInt32),
                                           std::make_tuple(DType::kBFloat16, int64_t{64}, DType::kInt64)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_d" +
                                  std::to_string(std::get<1>(info.param)) + "_" +
                                  std::string(dtype_name(std::get<2>(info.param)));
                         });

TEST_F(GpuTest, AttentionRefusesHeadsThatDoNotGroup) {
  const AttentionShape shape{.tokens = 1, .q_heads = 3, .kv_heads = 2, .head_dim = 8, .sequences = 1, .scale = 0.0};
  EXPECT_THROW(attention_fwd(DType::kFloat32, nullptr, nullptr, nullptr, DType::kInt64, nullptr, nullptr, nullptr,
                             shape, stream_.get()),
               Error);
}

}  // namespace
}  // namespace hspmd::kernels::cuda
