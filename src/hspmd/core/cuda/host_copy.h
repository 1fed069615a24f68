// Host <-> device copies through pinned (page-locked) host memory.
//
// Why: the GPU's copy engines read and write only pinned memory. From pageable memory (a Tensor's,
// a checkpoint's, a Hugging Face file's) the driver stages the copy itself through its own small
// buffer and the call returns only when it is done. HostCopier owns two pinned chunks and
// alternates them: while the copy engine moves one, the host fills (or drains) the other, and the
// host never waits for the device's earlier work on other chunks.
//
//   HostCopier copier(device);                          // 2 x 8 MiB pinned
//   copier.to_device(host.raw_data(), dev, host.nbytes(), streams.compute());
//   copier.to_host(dev, out.raw_data(), out.nbytes(), streams.compute());  // returns with the data
//
// to_device returns once the host bytes have been read (the host buffer may change), with the last
// chunks' copies possibly still queued on the stream; kernels queued after it on that stream see
// the data. to_host returns once the host buffer holds the data, so it waits for the work queued
// before it on the stream.
#pragma once

#include <cstddef>

#include "hspmd/core/cuda/stream.h"
#include "hspmd/core/tensor.h"

namespace hspmd::cuda {

// Page-locked host memory (cudaHostAlloc), freed on destruction.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

class HostCopier {
 public:
  // chunk_bytes: each of the two pinned chunks (> 0).
  explicit HostCopier(int device, size_t chunk_bytes = size_t{8} << 20);

  void to_device(const void* host, void* device, size_t bytes, const Stream& stream);
  void to_host(const void* device, void* host, size_t bytes, const Stream& stream);

  // A device copy of a host tensor's bytes (device must hold tensor.nbytes()).
  void to_device(const Tensor& host, void* device, const Stream& stream) {
    to_device(host.raw_data(), device, host.nbytes(), stream);
  }
  // A host tensor of `shape` and `dtype` holding the device bytes.
  Tensor to_host(const void* device, const Shape& shape, DType dtype, const Stream& stream);

  size_t chunk_bytes() const { return chunk_bytes_; }

 private:
  int device_;
  size_t chunk_bytes_;
  PinnedBuffer chunks_[2];
  Event chunk_free_[2];  // recorded after the copy that last used each chunk
};

}  // namespace hspmd::cuda
