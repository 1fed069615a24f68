// Checking CUDA runtime calls: a failed call throws Error naming the call, CUDA's error name and
// its description.
//
//   HSPMD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
//     -> "cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream) failed: cudaErrorInvalidValue
//         (invalid argument)"
#pragma once

#include <cuda_runtime_api.h>

#include "hspmd/core/error.h"

#define HSPMD_CUDA_CHECK(call)                                                                    \
  do {                                                                                            \
    const cudaError_t hspmd_cuda_status_ = (call);                                                \
    HSPMD_CHECK(hspmd_cuda_status_ == cudaSuccess)                                                \
        << #call << " failed: " << cudaGetErrorName(hspmd_cuda_status_) << " ("                  \
        << cudaGetErrorString(hspmd_cuda_status_) << ")";                                        \
  } while (false)

namespace hspmd::cuda {

// CUDA devices this process sees; 0 when there is none or no usable driver (never throws).
int device_count();

// Makes `device` current for its scope and restores the previous one: CUDA's current device is a
// per-thread global, and a rank's calls must not move another component's. Destructors and other
// noexcept code pass kQuiet: a failure then leaves the device as it was instead of throwing.
class DeviceGuard {
 public:
  enum Failure { kThrow, kQuiet };
  explicit DeviceGuard(int device, Failure on_failure = kThrow);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

}  // namespace hspmd::cuda
