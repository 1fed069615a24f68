// Tensors whose storage is on the GPU (core/cuda/cuda_tensor_memory.h): host <-> device copies
// through the pinned chunks, zeros and fills on the device, the allocator's statistics, and
// data()'s refusal of device memory. (Tensor's routing is tested without a GPU in
// tests/core/device_tensor_test.cc.)
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "gpu/gpu_testlib.h"
#include "hspmd/core/cuda/cuda_tensor_memory.h"

namespace hspmd::cuda {
namespace {

TEST(CudaTensors, RoundTripEveryDTypeThroughTheDevice) {
  Allocator gpu = make_cuda_allocator({.device = 0, .capacity_bytes = 0, .name = "rank 0"});
  EXPECT_EQ(gpu.device().to_string(), "cuda:0");
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt64, DType::kInt32, DType::kFloat64}) {
    const Tensor host = dtype == DType::kInt64 || dtype == DType::kInt32
                            ? testing::random_ints({37, 3}, dtype, 5, -100, 100)
                            : testing::random_tensor({37, 3}, dtype == DType::kBFloat16 ? DType::kFloat32 : dtype, 5);
    const Tensor source = dtype == DType::kBFloat16 ? testing::to_bf16(host) : host;
    const Tensor on_gpu = source.clone(&gpu);
    EXPECT_EQ(on_gpu.device().to_string(), "cuda:0");
    const Tensor again = on_gpu.clone();  // device -> device
    const Tensor back = again.to_host();
    ASSERT_TRUE(back.on_host());
    EXPECT_EQ(std::memcmp(back.raw_data(), source.raw_data(), source.nbytes()), 0) << dtype_name(dtype);
  }
}

TEST(CudaTensors, LargerThanThePinnedChunksAndViews) {
  Allocator gpu = make_cuda_allocator({.device = 0, .capacity_bytes = 0, .name = ""});
  const Tensor host = testing::random_tensor({5, 1000003}, DType::kFloat32, 9);  // 20 MB: several 8 MiB chunks
  const Tensor on_gpu = host.clone(&gpu);
  EXPECT_TRUE(testing::all_close(on_gpu.narrow(0, 3, 2).to_host(), host.narrow(0, 3, 2), 0, 0));
  Tensor into = Tensor::zeros({2, 1000003}, DType::kFloat32, &gpu);
  into.copy_from(on_gpu.narrow(0, 1, 2));
  EXPECT_TRUE(testing::all_close(into.to_host(), host.narrow(0, 1, 2), 0, 0));
}

TEST(CudaTensors, ZerosFullAndFromVectorOnTheDevice) {
  Allocator gpu = make_cuda_allocator({.device = 0, .capacity_bytes = 0, .name = ""});
  EXPECT_EQ(Tensor::zeros({1001}, DType::kFloat32, &gpu).to_host().to_vector<float>(), std::vector<float>(1001, 0.0f));
  EXPECT_EQ(Tensor::full({3}, DType::kInt64, 7, &gpu).to_host().to_vector<int64_t>(), (std::vector<int64_t>{7, 7, 7}));
  EXPECT_EQ(Tensor::from_vector<double>({2}, {0.5, -2}, &gpu).to_host().to_vector<double>(),
            (std::vector<double>{0.5, -2}));
}

TEST(CudaTensors, StatisticsAndTheHostRefusal) {
  Allocator gpu = make_cuda_allocator({.device = 0, .capacity_bytes = 1 << 20, .name = "small card"});
  {
    const Tensor t = Tensor::empty({1000}, DType::kFloat32, &gpu);
    EXPECT_EQ(gpu.current_bytes(), 4000u);
    EXPECT_EQ(gpu.peak_bytes(), 4000u);
    try {
      t.data<float>();
      FAIL() << "data() of a GPU tensor";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("lives on cuda:0"), std::string::npos) << e.what();
    }
    EXPECT_THROW(Tensor::empty({1 << 20}, DType::kFloat32, &gpu), OutOfMemoryError);  // 4 MiB > 1 MiB
  }
  EXPECT_EQ(gpu.current_bytes(), 0u);
  EXPECT_GT(gpu.cached_bytes(), 0u);  // the block stays for the next step
  EXPECT_EQ(&cuda_tensor_memory(gpu).streams(), &cuda_tensor_memory(gpu).streams());
  Allocator host;
  EXPECT_THROW(cuda_tensor_memory(host), Error);
}

}  // namespace
}  // namespace hspmd::cuda
