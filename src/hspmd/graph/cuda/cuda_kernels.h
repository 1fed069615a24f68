// The CUDA backend of the kernel registry (graph/kernel_registry.h): for each op kind the decoder
// graphs run, an entry under DeviceType::kCUDA that takes the device pointers and sizes from the
// op's tensors and queues the kernels/cuda/ function on the rank's compute stream. The tensors are
// those of a GPU allocator (core/cuda/cuda_tensor_memory.h): KernelContext::allocator is where the
// entry finds the stream, the caching allocator and so its scratch memory.
//
//   Allocator gpu = cuda::make_cuda_allocator({.device = 0});
//   KernelRegistry kernels = build_cuda_kernels();
//   Executor ex(g, {loss}, {.allocator = &gpu, .kernels = &kernels});   // feeds and params on gpu
//
// The entries queue work and return: nothing waits for the GPU until a tensor is copied to the
// host. As on the CPU, the bf16_operands attribute rounds the operands of matmul, attention and
// the lm-head loss to bfloat16 (float32 accumulation). Building the registry touches no GPU.
#pragma once

#include <string>
#include <vector>

#include "hspmd/graph/kernel_registry.h"

namespace hspmd::graph {

// Every CUDA entry (DeviceType::kCUDA); cpu_only_kernels() lists what the CPU registry has beyond it.
KernelRegistry build_cuda_kernels();

// The CUDA kernels of every op kind, built on first use.
const KernelRegistry& cuda_kernels();

// A (kind, dtype) the CPU registry runs that has no CUDA entry, and why. A graph holding one cannot
// run on a GPU (run_kernel's error names the op); tests/gpu/kernel_coverage_host_test.cc checks
// this list against both registries, so a missing kernel fails a test here, not a GPU run there.
struct CpuOnlyKernel {
  OpKind kind;
  DType dtype;
  std::string reason;
};
const std::vector<CpuOnlyKernel>& cpu_only_kernels();

}  // namespace hspmd::graph
