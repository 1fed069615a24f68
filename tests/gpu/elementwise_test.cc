// CUDA pointwise kernels against the CPU ones: SwiGLU and GeGLU forward and backward, add and scale
// (kernels/elementwise.h), bias and its gradient (bias.h, reduce.h), casts (cast.h) and bf16
// rounding (bf16_rounding.h), float32 and bfloat16, odd sizes.
#include "hspmd/kernels/cuda/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "gpu/gpu_testlib.h"
#include "hspmd/kernels/bf16_rounding.h"
#include "hspmd/kernels/bias.h"
#include "hspmd/kernels/cast.h"
#include "hspmd/kernels/elementwise.h"
#include "hspmd/kernels/reduce.h"

namespace hspmd::kernels::cuda {
namespace {

using namespace hspmd::testing;

class CudaPointwise : public GpuTest, public ::testing::WithParamInterface<DType> {
 protected:
  bool bf16() const { return GetParam() == DType::kBFloat16; }
  // Random values representable in the tested dtype, as float32.
  Tensor input(const Shape& shape, uint64_t seed, double low = -4.0, double high = 4.0) {
    Tensor x = random_tensor(shape, DType::kFloat32, seed, low, high);
    return bf16() ? to_f32(to_bf16(x)) : x;
  }
  hspmd::cuda::DeviceBuffer in(const Tensor& t) { return upload(bf16() ? to_bf16(t) : t); }
  Tensor out(const hspmd::cuda::DeviceBuffer& d, const Shape& shape) { return to_f32(download(d, shape, GetParam())); }
  double rtol() const { return bf16() ? kBFloat16Rtol : kFloat32Rtol; }
  double atol() const { return bf16() ? kBFloat16Atol : kFloat32Atol; }
};

TEST_P(CudaPointwise, SwigluForwardAndBackward) {
  const DType dtype = GetParam();
  for (int64_t n : {int64_t{1}, int64_t{1023}, int64_t{300007}}) {
    SCOPED_TRACE(n);
    Tensor g = input({n}, 31), u = input({n}, 32), dy = input({n}, 33);
    Tensor y = Tensor::empty({n}, DType::kFloat32), dg = y.clone(), du = y.clone();
    kernels::swiglu_fwd(g, u, y);
    kernels::swiglu_bwd(g, u, dy, dg, du);
    auto gg = in(g), gu = in(u), gdy = in(dy);
    auto gy = device_empty({n}, dtype), gdg = device_empty({n}, dtype), gdu = device_empty({n}, dtype);
    swiglu_fwd(dtype, gg.data(), gu.data(), gy.data(), n, stream_.get());
    swiglu_bwd(dtype, gg.data(), gu.data(), gdy.data(), gdg.data(), gdu.data(), n, stream_.get());
    EXPECT_TRUE(all_close(out(gy, {n}), y, rtol(), atol(), "y"));
    EXPECT_TRUE(all_close(out(gdg, {n}), dg, rtol(), atol(), "dgate"));
    EXPECT_TRUE(all_close(out(gdu, {n}), du, rtol(), atol(), "dup"));
    // In place, both gradients over their inputs.
    swiglu_bwd(dtype, gg.data(), gu.data(), gdy.data(), gg.data(), gu.data(), n, stream_.get());
    EXPECT_TRUE(all_close(out(gg, {n}), dg, rtol(), atol(), "dgate in place"));
    EXPECT_TRUE(all_close(out(gu, {n}), du, rtol(), atol(), "dup in place"));
  }
}

TEST_P(CudaPointwise, BiasAdd) {
  const DType dtype = GetParam();
  const int64_t rows = 37, cols = 129;
  Tensor x = input({rows, cols}, 41), b = input({cols}, 42);
  Tensor y = Tensor::empty({rows, cols}, DType::kFloat32);
  kernels::bias_add(x, b, y);
  auto gx = in(x), gb = in(b);
  auto gy = device_empty({rows, cols}, dtype);
  bias_add(dtype, gx.data(), gb.data(), gy.data(), rows, cols, stream_.get());
  EXPECT_TRUE(all_close(out(gy, {rows, cols}), y, rtol(), atol(), "y"));
}

TEST_P(CudaPointwise, GegluTanhForwardAndBackward) {
  const DType dtype = GetParam();
  for (int64_t n : {int64_t{1}, int64_t{300007}}) {
    SCOPED_TRACE(n);
    Tensor g = input({n}, 61), u = input({n}, 62), dy = input({n}, 63);
    Tensor y = Tensor::empty({n}, DType::kFloat32), dg = y.clone(), du = y.clone();
    kernels::geglu_tanh_fwd(g, u, y);
    kernels::geglu_tanh_bwd(g, u, dy, dg, du);
    auto gg = in(g), gu = in(u), gdy = in(dy);
    auto gy = device_empty({n}, dtype), gdg = device_empty({n}, dtype), gdu = device_empty({n}, dtype);
    geglu_tanh_fwd(dtype, gg.data(), gu.data(), gy.data(), n, stream_.get());
    geglu_tanh_bwd(dtype, gg.data(), gu.data(), gdy.data(), gdg.data(), gdu.data(), n, stream_.get());
    EXPECT_TRUE(all_close(out(gy, {n}), y, rtol(), atol(), "y"));
    EXPECT_TRUE(all_close(out(gdg, {n}), dg, rtol(), atol(), "dgate"));
    EXPECT_TRUE(all_close(out(gdu, {n}), du, rtol(), atol(), "dup"));
  }
}

TEST_P(CudaPointwise, AddAndScale) {
  const DType dtype = GetParam();
  const int64_t n = 100003;
  Tensor a = input({n}, 71), b = input({n}, 72);
  Tensor sum = Tensor::empty({n}, DType::kFloat32), scaled = sum.clone();
  kernels::add(a, b, sum);
  kernels::scale(a, -0.37, scaled);
  auto ga = in(a), gb = in(b), gsum = device_empty({n}, dtype), gscaled = device_empty({n}, dtype);
  add(dtype, ga.data(), gb.data(), gsum.data(), n, stream_.get());
  scale(dtype, ga.data(), -0.37, gscaled.data(), n, stream_.get());
  EXPECT_TRUE(all_close(out(gsum, {n}), sum, rtol(), atol(), "a + b"));
  EXPECT_TRUE(all_close(out(gscaled, {n}), scaled, rtol(), atol(), "a * -0.37"));
}

TEST_P(CudaPointwise, SumRowsIsTheBiasGradient) {
  const DType dtype = GetParam();
  for (int64_t rows : {int64_t{1}, int64_t{1001}}) {
    const int64_t cols = 67;
    Tensor dy = input({rows, cols}, 81, -1.0, 1.0);
    Tensor dbias = Tensor::empty({cols}, DType::kFloat32);
    kernels::sum(dy, {0}, dbias);
    auto gdy = in(dy), gdb = device_empty({cols}, dtype);
    sum_rows(dtype, gdy.data(), gdb.data(), rows, cols, stream_.get());
    // A sum of up to 1001 rows in float32: its rounding grows with the count.
    EXPECT_TRUE(all_close(out(gdb, {cols}), dbias, bf16() ? kBFloat16Rtol : 1e-4, bf16() ? 5e-2 : 1e-4, "dbias"));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaPointwise, ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Casts and rounding are exact operations: the GPU must give the CPU's bits.
TEST_F(GpuTest, CastsMatchTheCpuBitForBit) {
  const int64_t n = 10007;
  Tensor x64 = random_tensor({n}, DType::kFloat64, 51, -1e3, 1e3);
  // Ties and specials: a value halfway between two bfloat16s, infinities, NaN.
  x64.data<double>()[0] = 1.0 + 1.0 / 256;
  x64.data<double>()[1] = std::numeric_limits<double>::infinity();
  x64.data<double>()[2] = -std::numeric_limits<double>::infinity();
  x64.data<double>()[3] = std::numeric_limits<double>::quiet_NaN();
  for (DType from : {DType::kFloat64, DType::kFloat32, DType::kBFloat16}) {
    Tensor src = Tensor::empty({n}, from);
    kernels::cast(x64, src);
    auto gsrc = upload(src);
    for (DType to : {DType::kFloat64, DType::kFloat32, DType::kBFloat16}) {
      const std::string what = std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to));
      Tensor expected = Tensor::empty({n}, to);
      kernels::cast(src, expected);
      auto gdst = device_empty({n}, to);
      cast(from, gsrc.data(), to, gdst.data(), n, stream_.get());
      EXPECT_TRUE(all_close(download(gdst, {n}, to), expected, 0, 0, what));
    }
  }
}

TEST_F(GpuTest, RoundToBfloat16MatchesTheCpuBitForBit) {
  const int64_t n = 4099;
  Tensor x = random_tensor({n}, DType::kFloat32, 61, -10, 10);
  x.data<float>()[0] = 1.0f + 1.0f / 256;  // a tie: rounds to even (1.0)
  x.data<float>()[1] = 1.0f + 3.0f / 256;  // a tie: rounds to even (1 + 4/256)
  Tensor expected = Tensor::empty({n}, DType::kFloat32);
  kernels::round_to_bfloat16(x, expected);
  auto gx = upload(x);
  round_to_bfloat16(gx.as<float>(), gx.as<float>(), n, stream_.get());
  EXPECT_TRUE(all_close(download(gx, {n}, DType::kFloat32), expected, 0, 0, "rounded"));
}

}  // namespace
}  // namespace hspmd::kernels::cuda
