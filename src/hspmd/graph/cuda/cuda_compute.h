// A GPU as a trainer's ComputeDevice (graph/compute_device.h): tensors in the GPU's caching
// allocator on a compute stream of their own (core/cuda/cuda_tensor_memory.h), the CUDA kernel
// registry (graph/cuda/cuda_kernels.h), and the CUDA kernels for the gradients' accumulation,
// their squares (float64 on the device; the host waits for that one number) and AdamW
// (kernels/cuda/adamw.h).
//
//   ComputeDevice gpu = cuda_compute({.device = 0, .name = "rank 0"});
#pragma once

#include "hspmd/core/cuda/cuda_tensor_memory.h"
#include "hspmd/graph/compute_device.h"

namespace hspmd::graph {

// Error naming the device when this process sees no such GPU.
ComputeDevice cuda_compute(cuda::CudaTensorMemory::Options options);

}  // namespace hspmd::graph
