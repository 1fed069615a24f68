// The devices `hspmd profile` measures instead of the host's cores: one rank per device, each with
// its ComputeDevice (graph/compute_device.h: memory, kernels, the optimizer) and communicators that
// move that device's memory. The profiler (tuning/profiler.h) only goes through these, so the
// measuring path it takes on GPUs runs on the CPU too, over the tests' fake device.
//
//   ProfiledDevices gpus = cuda_profiled_devices(0);        // cuda:0, cuda:1, ... (NCCL between them)
//   ProfilerOptions o{.model = path, .on = &gpus};
//   planner::Profile p = profile_host(model, o);
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "hspmd/comm/group_cache.h"
#include "hspmd/graph/compute_device.h"

namespace hspmd::tuning {

// A device's memory as its driver reports it (cudaMemGetInfo).
struct DeviceMemoryInfo {
  size_t total_bytes = 0;
  size_t free_bytes = 0;
};

struct ProfiledDevices {
  std::string description;  // for the profile's source: "NVIDIA H200 (cuda:0)"
  std::string kind;         // the device kind a profile names by default: "NVIDIA H200"
  int count = 1;            // devices, one rank each: TP degrees and links go up to it
  // Rank r's device; called once per rank and profile, the result reused by every measurement.
  std::function<graph::ComputeDevice(int rank)> compute;
  // Rank r's communicators (given its device): they move the device's memory.
  std::function<comm::Backend(int rank, const graph::ComputeDevice& compute)> backend;
  // The device's memory now, by the driver's count (the CUDA context and libraries included).
  std::function<DeviceMemoryInfo(int rank)> memory;
};

// The GPUs from cuda:first on that this process sees, NCCL between them. Error naming the device
// when there is none, or when this hspmd was built without the CUDA backend.
ProfiledDevices cuda_profiled_devices(int first);

}  // namespace hspmd::tuning
