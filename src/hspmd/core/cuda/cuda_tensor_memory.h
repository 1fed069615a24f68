// GPU memory for Tensors: the MemoryBackend (core/allocator.h) of one rank on one GPU. It owns the
// rank's streams (core/cuda/stream.h), its caching allocator (core/cuda/cuda_allocator.h), whose
// blocks are filed under the compute stream, and the pinned copier that moves tensors between the
// host and the GPU (core/cuda/host_copy.h). An Allocator made from it hands out GPU memory, and
// its tensors say so (Tensor::device() is cuda:<device>):
//
//   Allocator gpu = make_cuda_allocator({.device = 0, .name = "rank 0"});
//   Tensor w = host_w.clone(&gpu);                        // host -> device through pinned chunks
//   CudaTensorMemory& m = cuda_tensor_memory(gpu);      // streams and allocator, for kernels
//   my_kernel<<<..., m.streams().compute().get()>>>(w.device_data<float>());
//   Tensor back = w.to_host();                            // returns once the bytes are on the host
//
// Every allocation is for the compute stream: a block freed while kernels queued there may still
// read it is handed out again only to later work on that stream, which runs after them. A tensor
// written on another stream (communication) must be ordered before the compute stream's next use
// of it by an event (RankStreams::compute_waits_for_comm) before it is freed.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "hspmd/core/allocator.h"
#include "hspmd/core/cuda/cuda_allocator.h"
#include "hspmd/core/cuda/host_copy.h"
#include "hspmd/core/cuda/stream.h"

namespace hspmd::cuda {

class CudaTensorMemory final : public MemoryBackend {
 public:
  struct Options {
    int device = 0;
    // 0: the card's memory; otherwise emulates a card with this many bytes (OutOfMemoryError past it).
    size_t capacity_bytes = 0;
    // In error messages ("rank 2"); empty: "cuda:<device>".
    std::string name;
  };
  explicit CudaTensorMemory(Options options);

  Device device() const override { return Device{DeviceType::kCUDA, device_}; }
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) noexcept override;
  size_t current_bytes() const override { return allocator_.stats().current_bytes; }
  size_t peak_bytes() const override { return allocator_.stats().peak_bytes; }
  void reset_peak() override { allocator_.reset_peak(); }
  size_t capacity_bytes() const override;
  void set_capacity_bytes(size_t bytes) override;
  const std::string& name() const override { return name_; }
  size_t cached_bytes() const override { return allocator_.stats().cached_bytes; }
  void release_cached() override { allocator_.release_cached(); }
  // Host -> device: through the pinned chunks, returns once the host bytes are read (the copy is
  // queued on the compute stream ahead of later kernels). Device -> host: returns with the bytes.
  // Device -> device: queued on the compute stream.
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) override;
  void zero(void* ptr, size_t bytes) override;

  RankStreams& streams() { return *streams_; }
  cudaStream_t stream() const { return streams_->compute().get(); }
  CudaAllocator& allocator() { return allocator_; }
  int device_index() const { return device_; }

 private:
  int device_;
  std::string name_;
  size_t capacity_bytes_;
  std::unique_ptr<RankStreams> streams_;
  CudaAllocator allocator_;
  std::mutex copier_mu_;  // the copier's two chunks serve one copy at a time
  HostCopier copier_;
};

// An Allocator whose tensors live on GPU `options.device`. Throws Error when CUDA cannot reach it.
Allocator make_cuda_allocator(CudaTensorMemory::Options options);

// The CUDA backend behind `allocator`; an Error naming the allocator's device when it is another.
CudaTensorMemory& cuda_tensor_memory(const Allocator& allocator);

}  // namespace hspmd::cuda
