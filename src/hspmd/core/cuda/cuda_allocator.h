// The CUDA caching allocator: the device-independent BlockPool (core/block_pool.h: size classes,
// per-stream caches, statistics, a capacity, out-of-memory errors) over plain cudaMalloc and
// cudaFree on one GPU. Never managed memory: it is paged in on demand and a request beyond the
// card's memory can hang the GPU instead of failing.
//
//   CudaAllocator memory({.device = 0, .capacity_bytes = 24ull << 30});  // behave like a 24 GB card
//   DeviceBuffer x(memory, 4096 * sizeof(float), stream);                  // freed into the cache
//   memory.stats().peak_bytes;
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "hspmd/core/block_pool.h"

namespace hspmd::cuda {

// cudaMalloc / cudaFree on one device (made current around each call).
class CudaMemory : public RawMemory {
 public:
  explicit CudaMemory(int device);
  // nullptr when the device is out of memory; any other failure throws.
  void* allocate(size_t bytes) override;
  void free(void* ptr) noexcept override;
  size_t total_bytes() const override { return total_bytes_; }
  std::string name() const override;

 private:
  int device_;
  size_t total_bytes_ = 0;
};

class CudaAllocator {
 public:
  struct Options {
    int device = 0;
    // 0: the card's memory. Otherwise emulates a card with this many bytes.
    size_t capacity_bytes = 0;
    // For error messages; empty: "cuda:<device>".
    std::string name;
  };
  explicit CudaAllocator(Options options);

  // A block for use on `stream` (its cache is that stream's). Throws OutOfMemoryError.
  void* allocate(size_t bytes, cudaStream_t stream);
  void deallocate(void* ptr) { pool_.deallocate(ptr); }
  BlockPoolStats stats() const { return pool_.stats(); }
  void reset_peak() { pool_.reset_peak(); }
  void set_capacity_bytes(size_t bytes) { pool_.set_capacity_bytes(bytes); }
  // Gives the cache back to the device (cudaFree synchronizes the device).
  void release_cached() { pool_.release_cached(); }
  int device() const { return device_; }

 private:
  int device_;
  BlockPool pool_;
};

// One allocation of a CudaAllocator, freed into its cache on destruction. Movable, not copyable.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(CudaAllocator& allocator, size_t bytes, cudaStream_t stream);
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  void reset();

 private:
  CudaAllocator* allocator_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace hspmd::cuda
