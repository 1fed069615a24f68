// CUDA RoPE against the CPU kernel (kernels/rope.h), forward and backward, float32 and bfloat16,
// int64 and int32 positions (packed sequences restarting at 0, and large positions where float32
// angles would lose precision), odd token and head counts.
#include "hspmd/kernels/cuda/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu/gpu_testlib.h"
#include "hspmd/kernels/rope.h"

namespace hspmd::kernels::cuda {
namespace {

using namespace hspmd::testing;

class CudaRope : public GpuTest, public ::testing::WithParamInterface<std::tuple<DType, DType>> {};

TEST_P(CudaRope, ForwardAndBackwardMatchTheCpu) {
  const auto [dtype, positions_dtype] = GetParam();
  const bool bf16 = dtype == DType::kBFloat16;
  const int64_t tokens = 23, heads = 3, head_dim = 34;
  std::vector<double> inv_freq(head_dim / 2);
  for (int64_t i = 0; i < head_dim / 2; ++i) inv_freq[i] = std::pow(500000.0, -2.0 * i / head_dim);
  // Two packed sequences from 0, then positions past 100k.
  std::vector<int64_t> positions;
  for (int64_t t = 0; t < tokens; ++t) positions.push_back(t < 9 ? t : t < 17 ? t - 9 : 131000 + 37 * t);
  Tensor pos = Tensor::from_vector({tokens}, positions);
  if (positions_dtype == DType::kInt32) {
    Tensor p32 = Tensor::empty({tokens}, DType::kInt32);
    for (int64_t t = 0; t < tokens; ++t) p32.data<int32_t>()[t] = static_cast<int32_t>(positions[t]);
    pos = p32;
  }
  Tensor x = random_tensor({tokens, heads, head_dim}, DType::kFloat32, 21);
  if (bf16) x = to_f32(to_bf16(x));
  Tensor y = Tensor::empty(x.shape(), DType::kFloat32), dx = Tensor::empty(x.shape(), DType::kFloat32);
  kernels::rope_fwd(x, pos, inv_freq, y);
  kernels::rope_bwd(x, pos, inv_freq, dx);

  auto gx = upload(bf16 ? to_bf16(x) : x), gpos = upload(pos);
  auto gfreq = upload(Tensor::from_vector({head_dim / 2}, inv_freq));
  auto gy = device_empty(x.shape(), dtype), gdx = device_empty(x.shape(), dtype);
  const RopeShape shape{.tokens = tokens, .heads = heads, .head_dim = head_dim};
  rope_fwd(dtype, gx.data(), positions_dtype, gpos.data(), gfreq.as<double>(), gy.data(), shape, stream_.get());
  rope_bwd(dtype, gx.data(), positions_dtype, gpos.data(), gfreq.as<double>(), gdx.data(), shape, stream_.get());
  const double rtol = bf16 ? kBFloat16Rtol : kFloat32Rtol, atol = bf16 ? kBFloat16Atol : kFloat32Atol;
  EXPECT_TRUE(all_close(to_f32(download(gy, x.shape(), dtype)), y, rtol, atol, "y"));
  EXPECT_TRUE(all_close(to_f32(download(gdx, x.shape(), dtype)), dx, rtol, atol, "dx"));
  // In place, as the graph may run it.
  rope_fwd(dtype, gx.data(), positions_dtype, gpos.data(), gfreq.as<double>(), gx.data(), shape, stream_.get());
  EXPECT_TRUE(all_close(to_f32(download(gx, x.shape(), dtype)), y, rtol, atol, "y in place"));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaRope,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::Values(DType::kInt64, DType::kInt32)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  std::string(dtype_name(std::get<1>(info.param)));
                         });

TEST_F(GpuTest, RopeRefusesAnOddHeadDim) {
  const RopeShape shape{.tokens = 1, .heads = 1, .head_dim = 3};
  EXPECT_THROW(rope_fwd(DType::kFloat32, nullptr, DType::kInt64, nullptr, nullptr, nullptr, shape, stream_.get()),
               Error);
}

}  // namespace
}  // namespace hspmd::kernels::cuda
