#include "hspmd/core/cuda/cuda_tensor_memory.h"

#include "hspmd/core/cuda/cuda_error.h"

namespace hspmd::cuda {

CudaTensorMemory::CudaTensorMemory(Options options)
    : device_(options.device),
      name_(options.name.empty() ? "cuda:" + std::to_string(options.device) : options.name),
      capacity_bytes_(options.capacity_bytes),
      streams_(std::make_unique<RankStreams>(options.device)),
      allocator_({.device = options.device, .capacity_bytes = options.capacity_bytes, .name = name_}),
      copier_(options.device) {}

void* CudaTensorMemory::allocate(size_t bytes) { return allocator_.allocate(bytes, stream()); }

void CudaTensorMemory::deallocate(void* ptr, size_t /*bytes*/) noexcept { allocator_.deallocate(ptr); }

size_t CudaTensorMemory::capacity_bytes() const { return capacity_bytes_; }

void CudaTensorMemory::set_capacity_bytes(size_t bytes) {
  capacity_bytes_ = bytes;
  allocator_.set_capacity_bytes(bytes);
}

void CudaTensorMemory::copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  const bool from_host = src_device.type == DeviceType::kCPU;
  const bool to_host = dst_device.type == DeviceType::kCPU;
  HSPMD_CHECK(!(from_host && to_host)) << name_ << ": a host-to-host copy is not a device copy";
  if (from_host) {
    std::lock_guard lock(copier_mu_);
    copier_.to_device(src, dst, bytes, streams_->compute());
  } else if (to_host) {
    std::lock_guard lock(copier_mu_);
    copier_.to_host(src, dst, bytes, streams_->compute());
  } else {
    DeviceGuard guard(device_);
    HSPMD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream()));
  }
}

void CudaTensorMemory::zero(void* ptr, size_t bytes) {
  DeviceGuard guard(device_);
  HSPMD_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream()));
}

Allocator make_cuda_allocator(CudaTensorMemory::Options options) {
  const int devices = device_count();
  HSPMD_CHECK(options.device >= 0 && options.device < devices)
      << "no CUDA device " << options.device << " (this process sees " << devices << ")";
  return Allocator(std::make_shared<CudaTensorMemory>(std::move(options)));
}

CudaTensorMemory& cuda_tensor_memory(const Allocator& allocator) {
  auto* memory = dynamic_cast<CudaTensorMemory*>(&allocator.backend());
  HSPMD_CHECK(memory != nullptr) << "allocator '" << allocator.name() << "' holds " << allocator.device().to_string()
                                 << " memory, not a CUDA rank's";
  return *memory;
}

}  // namespace hspmd::cuda
