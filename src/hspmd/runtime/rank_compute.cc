#include "hspmd/runtime/rank_compute.h"

#include <string>

#include "hspmd/core/error.h"
#if HSPMD_CUDA
#include "hspmd/core/cuda/cuda_error.h"
#include "hspmd/graph/cuda/cuda_compute.h"
#endif

namespace hspmd::runtime {

graph::ComputeDevice rank_compute(const TrainerOptions& train, const EmulatedDevice& device, int rank) {
  const size_t capacity = static_cast<size_t>(device.memory_bytes);
  std::string name = "rank " + std::to_string(rank);
  if (train.device.type == DeviceType::kCPU) return graph::cpu_compute({.capacity_bytes = capacity, .name = name});
#if HSPMD_CUDA
  const int visible = cuda::device_count();
  HSPMD_CHECK(train.device.index >= 0 && train.device.index < visible)
      << "device " << train.device.to_string() << ": "
      << (visible == 0 ? std::string("no CUDA device is visible to this process")
                       : "this process sees " + std::to_string(visible) + " CUDA device(s)");
  return graph::cuda_compute({.device = train.device.index, .capacity_bytes = capacity, .name = std::move(name)});
#else
  HSPMD_THROW() << "device " << train.device.to_string()
                << ": this hspmd was built without the CUDA backend (configured with HSPMD_CUDA off)";
#endif
}

}  // namespace hspmd::runtime
