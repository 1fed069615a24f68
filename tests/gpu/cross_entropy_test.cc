// CUDA cross-entropy against the CPU kernel (kernels/cross_entropy.h), forward and backward,
// float32 and bfloat16 logits, narrow and wide (more columns than threads) vocabularies, ignored
// tokens, and a NaN for a target the host should have refused.
#include "hspmd/kernels/cuda/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "gpu/gpu_testlib.h"
#include "hspmd/kernels/cross_entropy.h"

namespace hspmd::kernels::cuda {
namespace {

using namespace hspmd::testing;

class CudaCrossEntropy : public GpuTest, public ::testing::WithParamInterface<std::tuple<DType, int64_t>> {};

TEST_P(CudaCrossEntropy, ForwardAndBackwardMatchTheCpu) {
  const auto [dtype, vocab] = GetParam();
  const bool bf16 = dtype == DType::kBFloat16;
  const int64_t tokens = 19;
  Tensor logits = random_tensor({tokens, vocab}, DType::kFloat32, 81, -8.0, 8.0);
  if (bf16) logits = to_f32(to_bf16(logits));
  Tensor targets = random_ints({tokens}, DType::kInt64, 82, 0, vocab);
  targets.data<int64_t>()[3] = -100;  // ignored
  targets.data<int64_t>()[tokens - 1] = -100;
  Tensor dlosses = random_tensor({tokens}, DType::kFloat32, 83, 0.1, 1.0);
  Tensor losses = Tensor::empty({tokens}, DType::kFloat32), lse = losses.clone();
  Tensor dlogits = Tensor::empty({tokens, vocab}, DType::kFloat32);
  kernels::cross_entropy_fwd(logits, targets, losses, lse);
  kernels::cross_entropy_bwd(logits, targets, lse, dlosses, dlogits);

  auto glogits = upload(bf16 ? to_bf16(logits) : logits), gtargets = upload(targets), gdlosses = upload(dlosses);
  auto glosses = device_empty({tokens}, DType::kFloat32), glse = device_empty({tokens}, DType::kFloat32);
  auto gdlogits = device_empty({tokens, vocab}, dtype);
  const CrossEntropyShape shape{.tokens = tokens, .vocab = vocab, .ignore_index = -100};
  cross_entropy_fwd(dtype, glogits.data(), DType::kInt64, gtargets.data(), glosses.as<float>(), glse.as<float>(), shape,
                    stream_.get());
  cross_entropy_bwd(dtype, glogits.data(), DType::kInt64, gtargets.data(), glse.as<float>(), gdlosses.as<float>(),
                    gdlogits.data(), shape, stream_.get());
  EXPECT_TRUE(all_close(download(glosses, {tokens}, DType::kFloat32), losses, 1e-5, 1e-5, "losses"));
  EXPECT_TRUE(all_close(download(glse, {tokens}, DType::kFloat32), lse, 1e-5, 1e-5, "lse"));
  const double rtol = bf16 ? kBFloat16Rtol : 1e-4, atol = bf16 ? 1e-3 : 1e-6;
  EXPECT_TRUE(all_close(to_f32(download(gdlogits, {tokens, vocab}, dtype)), dlogits, rtol, atol, "dlogits"));
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaCrossEntropy,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::Values(int64_t{7}, int64_t{5003})),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_vocab" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST_F(GpuTest, CrossEntropyOfAnOutOfRangeTargetIsNan) {
  Tensor logits = random_tensor({2, 5}, DType::kFloat32, 84);
  Tensor targets = Tensor::from_vector<int32_t>({2}, {1, 5});
  auto glogits = upload(logits), gtargets = upload(targets);
  auto glosses = device_empty({2}, DType::kFloat32), glse = device_empty({2}, DType::kFloat32);
  cross_entropy_fwd(DType::kFloat32, glogits.data(), DType::kInt32, gtargets.data(), glosses.as<float>(),
                    glse.as<float>(), {.tokens = 2, .vocab = 5, .ignore_index = -100}, stream_.get());
  Tensor losses = download(glosses, {2}, DType::kFloat32);
  EXPECT_TRUE(std::isfinite(losses.data<float>()[0]));
  EXPECT_TRUE(std::isnan(losses.data<float>()[1]));
}

// Gemma's final-logit soft-capping: the loss of cap * tanh(z / cap), gradients of the raw logits.
TEST_F(GpuTest, CrossEntropyWithASoftcapMatchesTheCpu) {
  const int64_t tokens = 23, vocab = 301;
  Tensor logits = random_tensor({tokens, vocab}, DType::kFloat32, 91, -60.0, 60.0);
  Tensor targets = random_ints({tokens}, DType::kInt64, 92, 0, vocab);
  targets.data<int64_t>()[5] = -100;
  Tensor dlosses = random_tensor({tokens}, DType::kFloat32, 93, 0.1, 1.0);
  Tensor losses = Tensor::empty({tokens}, DType::kFloat32), lse = losses.clone();
  Tensor dlogits = Tensor::empty({tokens, vocab}, DType::kFloat32);
  const kernels::CrossEntropyOptions o{.ignore_index = -100, .vocab_start = 0, .vocab_size = 0, .softcap = 30.0};
  kernels::cross_entropy_fwd(logits, targets, losses, lse, o);
  kernels::cross_entropy_bwd(logits, targets, lse, dlosses, dlogits, o);
  auto glogits = upload(logits), gtargets = upload(targets), gdlosses = upload(dlosses);
  auto glosses = device_empty({tokens}, DType::kFloat32), glse = device_empty({tokens}, DType::kFloat32);
  auto gdlogits = device_empty({tokens, vocab}, DType::kFloat32);
  const CrossEntropyShape shape{.tokens = tokens, .vocab = vocab, .ignore_index = -100, .softcap = 30.0};
  cross_entropy_fwd(DType::kFloat32, glogits.data(), DType::kInt64, gtargets.data(), glosses.as<float>(),
                    glse.as<float>(), shape, stream_.get());
  cross_entropy_bwd(DType::kFloat32, glogits.data(), DType::kInt64, gtargets.data(), glse.as<float>(),
                    gdlosses.as<float>(), gdlogits.data(), shape, stream_.get());
  EXPECT_TRUE(all_close(download(glosses, {tokens}, DType::kFloat32), losses, 1e-5, 1e-5, "losses"));
  EXPECT_TRUE(all_close(download(glse, {tokens}, DType::kFloat32), lse, 1e-5, 1e-5, "lse"));
  EXPECT_TRUE(all_close(download(gdlogits, {tokens, vocab}, DType::kFloat32), dlogits, 1e-4, 1e-6, "dlogits"));
}

// The graph's token-loss scalars: loss = scale * sum(losses) (float64 sum), dlosses = dloss * scale.
TEST_F(GpuTest, ScaledLossSumAndTokenLossGrads) {
  const int64_t tokens = 1001;
  Tensor losses = random_tensor({tokens}, DType::kFloat32, 94, 0.0, 8.0);
  double expected = 0;
  for (int64_t i = 0; i < tokens; ++i) expected += losses.data<float>()[i];
  auto glosses = upload(losses), gscale = upload(Tensor::full({1}, DType::kFloat32, 0.25));
  auto gdloss = upload(Tensor::full({1}, DType::kFloat32, 3.0));
  auto gloss = device_empty({1}, DType::kFloat32), gdlosses = device_empty({tokens}, DType::kFloat32);
  scaled_loss_sum(glosses.as<float>(), tokens, gscale.as<float>(), gloss.as<float>(), stream_.get());
  token_loss_grads(gscale.as<float>(), gdloss.as<float>(), gdlosses.as<float>(), tokens, stream_.get());
  EXPECT_NEAR(download(gloss, {1}, DType::kFloat32).data<float>()[0], 0.25 * expected, 1e-6 * expected);
  EXPECT_TRUE(all_close(download(gdlosses, {tokens}, DType::kFloat32), Tensor::full({tokens}, DType::kFloat32, 0.75),
                        0, 0, "dlosses"));
}

}  // namespace
}  // namespace hspmd::kernels::cuda
