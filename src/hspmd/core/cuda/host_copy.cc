#include "hspmd/core/cuda/host_copy.h"

#include <algorithm>
#include <cstring>

#include "hspmd/core/cuda/cuda_error.h"

namespace hspmd::cuda {

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  HSPMD_CUDA_CHECK(cudaHostAlloc(&data_, std::max<size_t>(bytes, 1), cudaHostAllocDefault));
}

PinnedBuffer::~PinnedBuffer() { cudaFreeHost(data_); }

HostCopier::HostCopier(int device, size_t chunk_bytes)
    : device_(device),
      chunk_bytes_(chunk_bytes),
      chunks_{PinnedBuffer(chunk_bytes), PinnedBuffer(chunk_bytes)},
      chunk_free_{Event(device), Event(device)} {
  HSPMD_CHECK(chunk_bytes > 0) << "HostCopier: chunk_bytes must be positive";
}

void HostCopier::to_device(const void* host, void* device, size_t bytes, const Stream& stream) {
  DeviceGuard guard(device_);
  const char* src = static_cast<const char*>(host);
  char* dst = static_cast<char*>(device);
  for (size_t offset = 0, i = 0; offset < bytes; offset += chunk_bytes_, i ^= 1) {
    const size_t n = std::min(chunk_bytes_, bytes - offset);
    chunk_free_[i].synchronize();  // the copy that read this chunk last has finished
    std::memcpy(chunks_[i].data(), src + offset, n);
    HSPMD_CUDA_CHECK(cudaMemcpyAsync(dst + offset, chunks_[i].data(), n, cudaMemcpyHostToDevice, stream.get()));
    chunk_free_[i].record(stream);
  }
}

void HostCopier::to_host(const void* device, void* host, size_t bytes, const Stream& stream) {
  DeviceGuard guard(device_);
  const char* src = static_cast<const char*>(device);
  char* dst = static_cast<char*>(host);
  // Chunk k is queued, then chunk k-1 (queued before it) is drained while the engine copies k.
  size_t pending_offset = 0, pending_bytes = 0;
  int pending = -1;
  auto drain = [&] {
    if (pending < 0) return;
    chunk_free_[pending].synchronize();
    std::memcpy(dst + pending_offset, chunks_[pending].data(), pending_bytes);
    pending = -1;
  };
  for (size_t offset = 0, i = 0; offset < bytes; offset += chunk_bytes_, i ^= 1) {
    const size_t n = std::min(chunk_bytes_, bytes - offset);
    chunk_free_[i].synchronize();  // (the chunk's previous contents were drained already)
    HSPMD_CUDA_CHECK(cudaMemcpyAsync(chunks_[i].data(), src + offset, n, cudaMemcpyDeviceToHost, stream.get()));
    chunk_free_[i].record(stream);
    drain();
    pending = static_cast<int>(i);
    pending_offset = offset;
    pending_bytes = n;
  }
  drain();
  // Nothing to copy still orders the call after the stream's work, as a copy would.
  if (bytes == 0) stream.synchronize();
}

Tensor HostCopier::to_host(const void* device, const Shape& shape, DType dtype, const Stream& stream) {
  Tensor out = Tensor::empty(shape, dtype);
  to_host(device, out.raw_data(), out.nbytes(), stream);
  return out;
}

}  // namespace hspmd::cuda
