#include "hspmd/runtime/comm_choice.h"

#include "hspmd/core/error.h"
#if HSPMD_CUDA
#include "hspmd/comm/nccl/nccl_communicator.h"
#include "hspmd/core/cuda/cuda_tensor_memory.h"
#endif

namespace hspmd::runtime {

CommKind parse_comm(const std::string& text) {
  if (text == "gloo") return CommKind::kGloo;
  if (text == "nccl") return CommKind::kNccl;
  HSPMD_THROW() << "--comm " << text << ": expected gloo or nccl";
}

const char* comm_name(CommKind kind) { return kind == CommKind::kNccl ? "nccl" : "gloo"; }

bool nccl_built() {
#if HSPMD_CUDA
  return true;
#else
  return false;
#endif
}

CommKind choose_comm(std::optional<CommKind> requested, Device device, bool with_nccl) {
  const bool gpu = device.type == DeviceType::kCUDA;
  if (!requested) return gpu && with_nccl ? CommKind::kNccl : CommKind::kGloo;
  if (*requested == CommKind::kNccl) {
    HSPMD_CHECK(gpu) << "--comm nccl moves GPU memory, but the ranks compute on " << device.to_string()
                     << " (give --device cuda, or --comm gloo)";
    HSPMD_CHECK(with_nccl) << "--comm nccl: this hspmd was built without NCCL (configured with HSPMD_CUDA off)";
  }
  return *requested;
}

Device rank_device(Device named, CommKind kind, int local_rank) {
  if (named.type != DeviceType::kCUDA || kind != CommKind::kNccl) return named;
  return Device{DeviceType::kCUDA, named.index + local_rank};
}

comm::Backend comm_backend(CommKind kind, const graph::ComputeDevice& compute, comm::Millis timeout,
                           const std::string& host) {
  if (kind == CommKind::kGloo) return comm::gloo_backend({.timeout = timeout, .host = host});
#if HSPMD_CUDA
  cuda::CudaTensorMemory& memory = cuda::cuda_tensor_memory(compute.allocator);
  return comm::nccl_backend({.device = memory.device_index(), .timeout = timeout, .compute_stream = memory.stream()});
#else
  HSPMD_THROW() << "--comm nccl: this hspmd was built without NCCL (configured with HSPMD_CUDA off); compute on "
                << compute.allocator.device().to_string();
#endif
}

}  // namespace hspmd::runtime
