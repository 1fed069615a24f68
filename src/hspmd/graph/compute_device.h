// Where a trainer computes: the memory its tensors live in, the kernels its graph's ops run with,
// and what a training step computes outside the graph (the gradients summed over micro-batches,
// their squares for the clipping norm, AdamW), so the trainer itself names no device.
//
//   ComputeDevice host = cpu_compute({.capacity_bytes = 2 << 30, .name = "rank 0"});
//   ComputeDevice gpu = cuda_compute({.device = 0, .name = "rank 0"});   // graph/cuda/cuda_compute.h
//   Tensor p = Tensor::zeros({4}, DType::kFloat32, &gpu.allocator);
//   gpu.add(grad_sum, grad_mb, grad_sum);                                  // on the GPU's stream
//
// The functions take the device's tensors (float32, as the trainer's gradients and state are).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "hspmd/core/allocator.h"
#include "hspmd/graph/kernel_registry.h"
#include "hspmd/kernels/adamw.h"

namespace hspmd::graph {

// dst[dst_starts + box] = src[src_starts + box] for the box of `extents` (kernels/slice.h's
// copy_region), both tensors on one device.
using RegionCopy = std::function<void(const Tensor& src, const std::vector<int64_t>& src_starts, const Tensor& dst,
                                      const std::vector<int64_t>& dst_starts, const std::vector<int64_t>& extents)>;

struct ComputeDevice {
  Allocator allocator;                  // every tensor of the run; its device is where it computes
  const KernelRegistry* kernels = nullptr;  // that device's kernels
  // out = a + b elementwise (out may be a).
  std::function<void(const Tensor& a, const Tensor& b, const Tensor& out)> add;
  // total[0] += sum of x's squared elements; total is a float64 {1} tensor on the device, so a step's
  // gradients add into one total that crosses to the host once (read_to_host), not once per tensor.
  std::function<void(const Tensor& x, const Tensor& total)> add_sum_squares;
  // total[at] += x's one element as float64 (a micro-batch's loss into the step's totals).
  std::function<void(const Tensor& x, const Tensor& total, int64_t at)> add_to_total;
  // One AdamW update of param, m and v in place (kernels/adamw.h).
  std::function<void(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, int64_t step,
                     const kernels::AdamWOptions& options)>
      adamw_step;
  // Box copies between the device's tensors: a Reshard's packing when the communicators move this
  // device's memory (runtime/reshard_exec.h).
  RegionCopy copy_region;

  // The trainer's reads of device results on the host (a step's loss and gradient norm): each one
  // waits for the device's queued work, so they are counted, and kept few.
  Tensor read_to_host(const Tensor& t) const {
    host_waits->fetch_add(1, std::memory_order_relaxed);
    return t.to_host();
  }
  std::shared_ptr<std::atomic<int64_t>> host_waits = std::make_shared<std::atomic<int64_t>>(0);
};

// The host: a host pool with these options and the CPU kernels.
ComputeDevice cpu_compute(Allocator::Options options);

}  // namespace hspmd::graph
