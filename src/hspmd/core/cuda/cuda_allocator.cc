#include "hspmd/core/cuda/cuda_allocator.h"

#include <utility>

#include "hspmd/core/cuda/cuda_error.h"

namespace hspmd::cuda {

CudaMemory::CudaMemory(int device) : device_(device) {
  DeviceGuard guard(device_);
  size_t free_bytes = 0;
  HSPMD_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes_));
}

void* CudaMemory::allocate(size_t bytes) {
  DeviceGuard guard(device_);
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // out of memory is not sticky, but the last-error slot holds it: clear it
    return nullptr;
  }
  HSPMD_CUDA_CHECK(status);
  return ptr;
}

void CudaMemory::free(void* ptr) noexcept {
  DeviceGuard guard(device_, DeviceGuard::kQuiet);
  cudaFree(ptr);
}

std::string CudaMemory::name() const { return "cuda:" + std::to_string(device_); }

CudaAllocator::CudaAllocator(Options options)
    : device_(options.device),
      pool_(std::make_unique<CudaMemory>(options.device),
            BlockPool::Options{.capacity_bytes = options.capacity_bytes, .name = std::move(options.name)}) {}

void* CudaAllocator::allocate(size_t bytes, cudaStream_t stream) {
  return pool_.allocate(bytes, reinterpret_cast<StreamKey>(stream));
}

DeviceBuffer::DeviceBuffer(CudaAllocator& allocator, size_t bytes, cudaStream_t stream)
    : allocator_(&allocator), data_(allocator.allocate(bytes, stream)), bytes_(bytes) {}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : allocator_(std::exchange(other.allocator_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    allocator_ = std::exchange(other.allocator_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (allocator_ != nullptr) allocator_->deallocate(data_);
  allocator_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace hspmd::cuda
