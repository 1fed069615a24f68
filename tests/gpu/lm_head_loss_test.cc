// The chunked CUDA lm head + cross-entropy against the CPU kernel (kernels/lm_head_loss.h):
// several chunks with a short last one, ignored tokens, float32 and bf16 operands (dlogits rounded
// to bf16 before its products on both sides).
#include "hspmd/kernels/cuda/lm_head_loss.h"

#include <gtest/gtest.h>

#include <string>

#include "gpu/gpu_testlib.h"
#include "hspmd/kernels/cross_entropy.h"
#include "hspmd/kernels/lm_head_loss.h"

namespace hspmd::kernels::cuda {
namespace {

using namespace hspmd::testing;

class CudaLmHeadLoss : public GpuTest, public ::testing::WithParamInterface<DType> {};

TEST_P(CudaLmHeadLoss, ForwardAndBackwardMatchTheCpu) {
  const DType dtype = GetParam();
  const bool bf16 = dtype == DType::kBFloat16;
  const int64_t tokens = 37, hidden = 24, vocab = 301;
  auto rounded = [&](Tensor t) { return bf16 ? to_f32(to_bf16(t)) : t; };
  Tensor x = rounded(random_tensor({tokens, hidden}, DType::kFloat32, 111));
  Tensor w = rounded(random_tensor({vocab, hidden}, DType::kFloat32, 112));
  Tensor targets = random_ints({tokens}, DType::kInt64, 113, 0, vocab);
  targets.data<int64_t>()[5] = -100;
  Tensor dlosses = random_tensor({tokens}, DType::kFloat32, 114, 0.1, 1.0);
  const kernels::LmHeadLossOptions o{.loss = {}, .bf16_operands = bf16, .chunk_rows = 0, .allocator = nullptr};
  Tensor stats = Tensor::empty({1, 3, tokens}, DType::kFloat64);
  kernels::lm_head_loss_stats(x, w, targets, stats.reshape({3, tokens}), o);
  Tensor losses = Tensor::empty({tokens}, DType::kFloat32), lse = losses.clone();
  kernels::cross_entropy_combine(stats, targets, losses, lse, o.loss);
  Tensor dx = Tensor::empty({tokens, hidden}, DType::kFloat32), dw = Tensor::empty({vocab, hidden}, DType::kFloat32);
  kernels::lm_head_loss_bwd(x, w, targets, lse, dlosses, dx, dw, o);

  auto in = [&](const Tensor& t) { return upload(bf16 ? to_bf16(t) : t); };
  auto gx = in(x), gw = in(w), gt = upload(targets), gdl = upload(dlosses);
  auto glosses = device_empty({tokens}, DType::kFloat32), glse = device_empty({tokens}, DType::kFloat32);
  auto gdx = device_empty({tokens, hidden}, DType::kFloat32), gdw = device_empty({vocab, hidden}, DType::kFloat32);
  CublasLtGemm gemm(0);
  const LmHeadLossContext ctx{gemm, memory_, stream_.get()};
  const LmHeadLossShape shape{.tokens = tokens, .hidden = hidden, .vocab = vocab, .ignore_index = -100, .chunk_rows = 8};
  lm_head_loss_fwd(ctx, dtype, gx.data(), gw.data(), DType::kInt64, gt.data(), glosses.as<float>(), glse.as<float>(),
                   shape);
  lm_head_loss_bwd(ctx, dtype, gx.data(), gw.data(), DType::kInt64, gt.data(), glse.as<float>(), gdl.as<float>(),
                   gdx.as<float>(), gdw.as<float>(), shape);
  EXPECT_TRUE(all_close(download(glosses, {tokens}, DType::kFloat32), losses, 1e-5, 1e-5, "losses"));
  EXPECT_TRUE(all_close(download(glse, {tokens}, DType::kFloat32), lse, 1e-5, 1e-5, "lse"));
  // bf16: a dlogit on either side of a rounding boundary rounds differently; one ulp of bf16.
  const double rtol = bf16 ? kBFloat16Rtol : 1e-5, atol = bf16 ? 1e-3 : 1e-6;
  EXPECT_TRUE(all_close(download(gdx, {tokens, hidden}, DType::kFloat32), dx, rtol, atol, "dx"));
  EXPECT_TRUE(all_close(download(gdw, {vocab, hidden}, DType::kFloat32), dw, rtol, atol, "dw"));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaLmHeadLoss, ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace hspmd::kernels::cuda
