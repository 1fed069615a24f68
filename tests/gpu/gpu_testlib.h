// Shared helpers of the GPU tests: a fixture holding device 0's stream, caching allocator and
// pinned copier, device copies of host tensors, and bf16 versions of random inputs. Every test
// compares a CUDA kernel with the CPU kernel (the oracle) on random inputs of odd sizes.
#pragma once

#include <gtest/gtest.h>

#include "hspmd/core/cuda/cuda_allocator.h"
#include "hspmd/core/cuda/host_copy.h"
#include "hspmd/core/cuda/stream.h"
#include "hspmd/core/tensor.h"
#include "kernels/kernel_testlib.h"

namespace hspmd::testing {

// Tolerances of a float32 CUDA kernel against the CPU one (a different order of float additions),
// and of a bfloat16 one (outputs rounded to 8-bit significands: relative 2^-8).
inline constexpr double kFloat32Rtol = 1e-5, kFloat32Atol = 1e-6;
inline constexpr double kBFloat16Rtol = 1.6e-2, kBFloat16Atol = 1e-2;

class GpuTest : public ::testing::Test {
 protected:
  GpuTest();

  // A device copy of a host tensor (its bytes; any dtype), ordered before later work on stream_.
  cuda::DeviceBuffer upload(const Tensor& host);
  // A host tensor from `bytes` device bytes (waits for the stream's work).
  Tensor download(const cuda::DeviceBuffer& device, const Shape& shape, DType dtype);
  // Device memory for a tensor of shape and dtype.
  cuda::DeviceBuffer device_empty(const Shape& shape, DType dtype);

  cuda::Stream stream_;
  cuda::CudaAllocator memory_;
  cuda::HostCopier copier_;
};

// x rounded to bfloat16 storage (x float32 or float64).
Tensor to_bf16(const Tensor& x);
// x converted to float32 (from bfloat16, float64 or float32).
Tensor to_f32(const Tensor& x);

}  // namespace hspmd::testing
