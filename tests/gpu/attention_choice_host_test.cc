// Which CUDA attention kernel runs and the flash kernel's plan (kernels/cuda/attention_choice.h),
// without a GPU: HSPMD_CUDA_ATTENTION's values, the flash kernel only for bf16, head dims 64 and
// 128 and 16-byte aligned tensors, its tiles and its shared memory (by hand from the layout).
#include <gtest/gtest.h>

#include <cstdlib>

#include "hspmd/core/error.h"
#include "hspmd/kernels/cuda/attention_choice.h"

namespace hspmd::kernels::cuda {
namespace {

using enum CudaAttentionKernel;

alignas(16) const unsigned char kAligned[32] = {};

TEST(AttentionChoice, TheEnvironmentAsksForFlashOrTheReference) {
  EXPECT_EQ(requested_attention_kernel(nullptr), kFlash);
  EXPECT_EQ(requested_attention_kernel(""), kFlash);
  EXPECT_EQ(requested_attention_kernel("flash"), kFlash);
  EXPECT_EQ(requested_attention_kernel("reference"), kReference);
  try {
    requested_attention_kernel("fast");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("HSPMD_CUDA_ATTENTION=fast"), std::string::npos) << e.what();
  }
}

TEST(AttentionChoice, FlashOnlyForBf16HeadDims64And128AndAlignedTensors) {
  const void* aligned = kAligned;
  const void* misaligned = kAligned + 8;
  EXPECT_TRUE(flash_attention_applies(DType::kBFloat16, 64, {aligned, aligned}));
  EXPECT_TRUE(flash_attention_applies(DType::kBFloat16, 128, {aligned}));
  EXPECT_FALSE(flash_attention_applies(DType::kFloat32, 64, {aligned}));
  EXPECT_FALSE(flash_attention_applies(DType::kBFloat16, 96, {aligned}));
  EXPECT_FALSE(flash_attention_applies(DType::kBFloat16, 256, {aligned}));
  EXPECT_FALSE(flash_attention_applies(DType::kBFloat16, 64, {aligned, misaligned}));

  EXPECT_EQ(choose_attention_kernel(kFlash, DType::kBFloat16, 64, {aligned}), kFlash);
  EXPECT_EQ(choose_attention_kernel(kReference, DType::kBFloat16, 64, {aligned}), kReference);
  EXPECT_EQ(choose_attention_kernel(kFlash, DType::kFloat32, 64, {aligned}), kReference);
  EXPECT_EQ(choose_attention_kernel(kFlash, DType::kBFloat16, 40, {aligned}), kReference);
  EXPECT_EQ(choose_attention_kernel(kFlash, DType::kBFloat16, 128, {misaligned}), kReference);
}

TEST(AttentionChoice, ChosenKernelReadsTheEnvironmentAtEveryCall) {
  const void* aligned = kAligned;
  ASSERT_EQ(setenv("HSPMD_CUDA_ATTENTION", "reference", 1), 0);
  EXPECT_EQ(chosen_attention_kernel(DType::kBFloat16, 64, {aligned}), kReference);
  ASSERT_EQ(unsetenv("HSPMD_CUDA_ATTENTION"), 0);
  EXPECT_EQ(chosen_attention_kernel(DType::kBFloat16, 64, {aligned}), kFlash);
  EXPECT_STREQ(attention_kernel_name(kFlash), "flash");
  EXPECT_STREQ(attention_kernel_name(kReference), "reference");
}

TEST(AttentionChoice, TilesOf64Rows) {
  EXPECT_EQ(flash_attention_tiles(0), 0);
  EXPECT_EQ(flash_attention_tiles(1), 1);
  EXPECT_EQ(flash_attention_tiles(64), 1);
  EXPECT_EQ(flash_attention_tiles(65), 2);
  EXPECT_EQ(flash_attention_tiles(405), 7);
  EXPECT_EQ(flash_attention_tiles(4096), 64);
}

TEST(AttentionChoice, SharedMemoryFitsAHopperBlock) {
  // Forward, D = 64: q, k, v 3 x 64 x 72 x 2 = 27648; scores 64 x 68 x 4 = 17408; P 64 x 72 x 2 =
  // 9216; out 64 x 68 x 4 = 17408.
  EXPECT_EQ(flash_attention_fwd_smem_bytes(64), 27648 + 17408 + 9216 + 17408);
  // D = 128: 3 x 64 x 136 x 2 = 52224; out 64 x 132 x 4 = 33792.
  EXPECT_EQ(flash_attention_fwd_smem_bytes(128), 52224 + 17408 + 9216 + 33792);
  // dK/dV, D = 128: 4 tiles 69632; scores and dp 34816; P^T and dS^T 18432; statistics 768.
  EXPECT_EQ(flash_attention_bwd_dkdv_smem_bytes(128), 69632 + 34816 + 18432 + 768);
  EXPECT_EQ(flash_attention_bwd_dq_smem_bytes(128), 69632 + 34816 + 9216 + 768);
  EXPECT_EQ(flash_attention_bwd_dkdv_smem_bytes(64), 36864 + 34816 + 18432 + 768);
  for (int64_t d : {64, 128}) {
    EXPECT_LE(flash_attention_fwd_smem_bytes(d), kHopperMaxBlockSmemBytes);
    EXPECT_LE(flash_attention_bwd_dkdv_smem_bytes(d), kHopperMaxBlockSmemBytes);
    EXPECT_LE(flash_attention_bwd_dq_smem_bytes(d), kHopperMaxBlockSmemBytes);
  }
}

}  // namespace
}  // namespace hspmd::kernels::cuda
