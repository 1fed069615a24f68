#include "hspmd/core/cuda/cuda_error.h"

namespace hspmd::cuda {

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error, so later calls do not report it
    return 0;
  }
  return count;
}

DeviceGuard::DeviceGuard(int device, Failure on_failure) {
  if (on_failure == kQuiet) {
    changed_ = cudaGetDevice(&previous_) == cudaSuccess && previous_ != device && cudaSetDevice(device) == cudaSuccess;
    return;
  }
  HSPMD_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) {
    HSPMD_CUDA_CHECK(cudaSetDevice(device));
    changed_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (changed_) cudaSetDevice(previous_);
}

}  // namespace hspmd::cuda
