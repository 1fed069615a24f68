#include "hspmd/core/error.h"
#include "hspmd/tuning/profiled_devices.h"

#if HSPMD_CUDA
#include <cuda_runtime_api.h>

#include "hspmd/core/cuda/cuda_error.h"
#include "hspmd/graph/cuda/cuda_compute.h"
#include "hspmd/runtime/comm_choice.h"
#endif

namespace hspmd::tuning {

ProfiledDevices cuda_profiled_devices(int first) {
#if HSPMD_CUDA
  const int visible = cuda::device_count();
  HSPMD_CHECK(first >= 0 && first < visible)
      << "profile --device cuda:" << first << ": "
      << (visible == 0 ? std::string("no CUDA device is visible to this process")
                       : "this process sees " + std::to_string(visible) + " CUDA device(s)");
  cudaDeviceProp props{};
  HSPMD_CUDA_CHECK(cudaGetDeviceProperties(&props, first));
  ProfiledDevices d;
  d.kind = props.name;
  d.count = visible - first;
  d.description = d.kind + " (cuda:" + std::to_string(first) +
                  (d.count > 1 ? " to cuda:" + std::to_string(visible - 1) : std::string()) + ")";
  d.compute = [first](int rank) {
    return graph::cuda_compute({.device = first + rank, .name = "profile rank " + std::to_string(rank)});
  };
  d.backend = [](int, const graph::ComputeDevice& compute) {
    return runtime::comm_backend(runtime::CommKind::kNccl, compute, comm::Millis(60'000), "");
  };
  d.memory = [first](int rank) {
    const cuda::DeviceGuard current(first + rank);
    DeviceMemoryInfo m;
    HSPMD_CUDA_CHECK(cudaMemGetInfo(&m.free_bytes, &m.total_bytes));
    return m;
  };
  return d;
#else
  HSPMD_THROW() << "profile --device cuda:" << first
                << ": this hspmd was built without the CUDA backend (configured with HSPMD_CUDA off)";
#endif
}

}  // namespace hspmd::tuning
