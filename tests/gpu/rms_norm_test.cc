// CUDA RMSNorm against the CPU kernel (kernels/rms_norm.h), forward and backward, float32 and
// bfloat16 storage, odd sizes (rows wider than a block of 1024 threads too).
#include "hspmd/kernels/cuda/rms_norm.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "gpu/gpu_testlib.h"
#include "hspmd/kernels/rms_norm.h"

namespace hspmd::kernels::cuda {
namespace {

using namespace hspmd::testing;

constexpr double kEps = 1e-5;

class CudaRmsNorm : public GpuTest, public ::testing::WithParamInterface<std::tuple<DType, int64_t, int64_t>> {};

TEST_P(CudaRmsNorm, ForwardAndBackwardMatchTheCpu) {
  const auto [dtype, rows, cols] = GetParam();
  const bool bf16 = dtype == DType::kBFloat16;
  // Inputs in the tested dtype; the CPU computes in float32 on the same values.
  Tensor x = random_tensor({rows, cols}, DType::kFloat32, 11, -2.0, 2.0);
  Tensor w = random_tensor({cols}, DType::kFloat32, 12, 0.5, 1.5);
  Tensor dy = random_tensor({rows, cols}, DType::kFloat32, 13);
  if (bf16) {
    x = to_f32(to_bf16(x));
    w = to_f32(to_bf16(w));
    dy = to_f32(to_bf16(dy));
  }
  auto in = [&](const Tensor& t) { return upload(bf16 ? to_bf16(t) : t); };
  Tensor y = Tensor::empty({rows, cols}, DType::kFloat32), rstd = Tensor::empty({rows}, DType::kFloat32);
  Tensor dx = Tensor::empty({rows, cols}, DType::kFloat32), dw = Tensor::empty({cols}, DType::kFloat32);
  kernels::rms_norm_fwd(x, w, kEps, y, rstd);
  kernels::rms_norm_bwd(x, w, rstd, dy, dx, dw);

  auto gx = in(x), gw = in(w), gdy = in(dy);
  auto gy = device_empty({rows, cols}, dtype), gdx = device_empty({rows, cols}, dtype);
  auto grstd = device_empty({rows}, DType::kFloat32), gdw = device_empty({cols}, DType::kFloat32);
  rms_norm_fwd(dtype, gx.data(), gw.data(), static_cast<float>(kEps), gy.data(), grstd.as<float>(), rows, cols,
               stream_.get());
  rms_norm_bwd(dtype, gx.data(), gw.data(), grstd.as<float>(), gdy.data(), gdx.data(), gdw.as<float>(), rows, cols,
               stream_.get());
  const double rtol = bf16 ? kBFloat16Rtol : kFloat32Rtol, atol = bf16 ? kBFloat16Atol : 1e-5;
  EXPECT_TRUE(all_close(to_f32(download(gy, {rows, cols}, dtype)), y, rtol, atol, "y"));
  EXPECT_TRUE(all_close(download(grstd, {rows}, DType::kFloat32), rstd, 1e-5, 1e-6, "rstd"));
  EXPECT_TRUE(all_close(to_f32(download(gdx, {rows, cols}, dtype)), dx, rtol, atol, "dx"));
  // A sum over every row in float32 on the GPU, in double on the CPU.
  EXPECT_TRUE(all_close(download(gdw, {cols}, DType::kFloat32), dw, 1e-4, 1e-4, "dweight"));
}

INSTANTIATE_TEST_SUITE_P(OddSizes, CudaRmsNorm,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::Values(int64_t{1}, int64_t{37}),
                                            ::testing::Values(int64_t{3}, int64_t{301}, int64_t{2049})),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_rows" +
                                  std::to_string(std::get<1>(info.param)) + "_cols" +
                                  std::to_string(std::get<2>(info.param));
                         });

TEST_F(GpuTest, RmsNormOfNoRowsZeroesDweight) {
  auto w = upload(Tensor::full({5}, DType::kFloat32, 1.0));
  auto dw = upload(Tensor::full({5}, DType::kFloat32, 7.0));
  rms_norm_bwd(DType::kFloat32, nullptr, w.data(), nullptr, nullptr, nullptr, dw.as<float>(), 0, 5, stream_.get());
  EXPECT_TRUE(all_close(download(dw, {5}, DType::kFloat32), Tensor::zeros({5}, DType::kFloat32), 0, 0, "dweight"));
}

// Gemma's norm: y = x * rstd * (1 + weight), weights around 0.
TEST_F(GpuTest, RmsNormWithAWeightOffsetMatchesTheCpu) {
  const int64_t rows = 29, cols = 257;
  Tensor x = random_tensor({rows, cols}, DType::kFloat32, 21, -2.0, 2.0);
  Tensor w = random_tensor({cols}, DType::kFloat32, 22, -0.5, 0.5);
  Tensor dy = random_tensor({rows, cols}, DType::kFloat32, 23);
  Tensor y = Tensor::empty({rows, cols}, DType::kFloat32), rstd = Tensor::empty({rows}, DType::kFloat32);
  Tensor dx = Tensor::empty({rows, cols}, DType::kFloat32), dw = Tensor::empty({cols}, DType::kFloat32);
  kernels::rms_norm_fwd(x, w, kEps, y, rstd, 1.0);
  kernels::rms_norm_bwd(x, w, rstd, dy, dx, dw, 1.0);
  auto gx = upload(x), gw = upload(w), gdy = upload(dy);
  auto gy = device_empty({rows, cols}, DType::kFloat32), gdx = device_empty({rows, cols}, DType::kFloat32);
  auto grstd = device_empty({rows}, DType::kFloat32), gdw = device_empty({cols}, DType::kFloat32);
  rms_norm_fwd(DType::kFloat32, gx.data(), gw.data(), static_cast<float>(kEps), gy.data(), grstd.as<float>(), rows,
               cols, stream_.get(), 1.0f);
  rms_norm_bwd(DType::kFloat32, gx.data(), gw.data(), grstd.as<float>(), gdy.data(), gdx.data(), gdw.as<float>(), rows,
               cols, stream_.get(), 1.0f);
  EXPECT_TRUE(all_close(download(gy, {rows, cols}, DType::kFloat32), y, kFloat32Rtol, 1e-5, "y"));
  EXPECT_TRUE(all_close(download(gdx, {rows, cols}, DType::kFloat32), dx, kFloat32Rtol, 1e-5, "dx"));
  EXPECT_TRUE(all_close(download(gdw, {cols}, DType::kFloat32), dw, 1e-4, 1e-4, "dweight"));
}

TEST_F(GpuTest, RmsNormRefusesFloat64) {
  EXPECT_THROW(rms_norm_fwd(DType::kFloat64, nullptr, nullptr, 1e-5f, nullptr, nullptr, 1, 1, stream_.get()), Error);
}

}  // namespace
}  // namespace hspmd::kernels::cuda
