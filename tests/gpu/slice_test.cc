// CUDA region copies, slices and concatenation (on the copy engine) against the CPU kernels
// (kernels/slice.h): odd shapes, every dimension, float32 and bfloat16, boxes of rank 4 that stay
// several copies.
#include "hspmd/kernels/cuda/slice.h"

#include <gtest/gtest.h>

#include <string>

#include "gpu/gpu_testlib.h"
#include "hspmd/kernels/slice.h"

namespace hspmd::kernels::cuda {
namespace {

using namespace hspmd::testing;

Tensor input(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor x = random_tensor(shape, DType::kFloat32, seed);
  return dtype == DType::kBFloat16 ? to_bf16(x) : x;
}

class CudaSlice : public GpuTest, public ::testing::WithParamInterface<DType> {};

TEST_P(CudaSlice, SliceAlongEveryDimension) {
  const DType dtype = GetParam();
  const Shape shape{3, 5, 7, 9};
  Tensor x = input(shape, dtype, 91);
  auto gx = upload(x);
  for (int dim = 0; dim < 4; ++dim) {
    const int64_t start = 1, length = shape.dim(dim) - 2;
    Dims out_dims = shape.dims();
    out_dims[dim] = length;
    Tensor expected = Tensor::empty(Shape(out_dims), dtype);
    kernels::slice(x, dim, start, length, expected);
    auto gout = device_empty(Shape(out_dims), dtype);
    slice(gx.data(), shape.dims(), dim, start, length, gout.data(), dtype, stream_.get());
    EXPECT_TRUE(all_close(download(gout, Shape(out_dims), dtype), expected, 0, 0, "dim " + std::to_string(dim)));
  }
}

TEST_P(CudaSlice, ConcatAlongEveryDimension) {
  const DType dtype = GetParam();
  for (int dim = 0; dim < 3; ++dim) {
    Dims a_dims{4, 3, 5}, b_dims{4, 3, 5};
    b_dims[dim] = 2;
    Dims out_dims = a_dims;
    out_dims[dim] += 2;
    Tensor a = input(Shape(a_dims), dtype, 92), b = input(Shape(b_dims), dtype, 93);
    Tensor expected = Tensor::empty(Shape(out_dims), dtype);
    kernels::concat({a, b}, dim, expected);
    auto ga = upload(a), gb = upload(b);
    auto gout = device_empty(Shape(out_dims), dtype);
    concat({ga.data(), gb.data()}, {a_dims, b_dims}, dim, gout.data(), dtype, stream_.get());
    EXPECT_TRUE(all_close(download(gout, Shape(out_dims), dtype), expected, 0, 0, "dim " + std::to_string(dim)));
  }
}

TEST_P(CudaSlice, RegionsOfRankFourIntoALargerTensor) {
  const DType dtype = GetParam();
  const Shape src_shape{4, 5, 6, 7}, dst_shape{5, 6, 7, 8};
  const Dims src_starts{1, 1, 1, 1}, dst_starts{0, 2, 1, 0}, extents{3, 4, 5, 6};
  Tensor src = input(src_shape, dtype, 94), dst = input(dst_shape, dtype, 95);
  Tensor expected = dst.clone();
  kernels::copy_region(src, src_starts, expected, dst_starts, extents);
  auto gsrc = upload(src), gdst = upload(dst);
  copy_region(gsrc.data(), src_shape.dims(), src_starts, gdst.data(), dst_shape.dims(), dst_starts, extents, dtype,
              stream_.get());
  EXPECT_TRUE(all_close(download(gdst, dst_shape, dtype), expected, 0, 0, "region"));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaSlice, ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace hspmd::kernels::cuda
