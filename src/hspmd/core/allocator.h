// Memory with per-allocator accounting and a cache of freed blocks. Each process (or each
// emulated device when ranks run as threads) owns one Allocator; a capacity emulates a device with
// less memory:
//
//   Allocator device_memory(Allocator::Options{.capacity_bytes = 2 << 30});
//   Tensor t = Tensor::empty({1024, 1024}, DType::kFloat32, &device_memory);
//   device_memory.peak_bytes();  // high-water mark, for memory reports
//
// Exceeding the capacity throws OutOfMemoryError naming the requested, in-use and capacity bytes.
//
// An Allocator is a handle on a pool (counters, capacity, cache); copies share the pool. Every
// tensor's storage holds a copy, so a tensor may outlive the Allocator object it came from (a
// rank's allocator dies with its trainer, the tensors it returned live on): the pool, and the
// memory in its cache, go when the last handle goes.
//
// Where the memory lives: an Allocator is a handle on a MemoryBackend. The default one is the host
// pool below; a GPU rank's is the CUDA caching allocator on the rank's compute stream
// (core/cuda/cuda_tensor_memory.h), whose tensors live on the GPU (Tensor::device()). This header
// names no device API, so the build without CUDA compiles it unchanged.
//
// The host pool's cache (why: a fresh block is page-faulted in on first touch, and glibc unmaps large blocks on
// free, so every training step faulted in its activations again): freed blocks are kept by size
// class and reused by a later request of the same class; the ones freed longest ago go first.
// Cached blocks do not count in current_bytes(), which is the bytes live tensors hold. The cache
// holds at most what the pool has ever held live (a step's blocks, which the next step reuses),
// and with a capacity at most what the live blocks leave of it: an emulated device never holds
// more than its capacity, and a request within the capacity never fails because of the cache.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "hspmd/core/device.h"

namespace hspmd {

// One pool of memory on one device: what an Allocator hands out and accounts. Thread-safe.
class MemoryBackend {
 public:
  virtual ~MemoryBackend() = default;
  virtual Device device() const = 0;
  // Throws OutOfMemoryError. `bytes` of deallocate is what allocate was given for ptr.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) noexcept = 0;
  virtual size_t current_bytes() const = 0;
  virtual size_t peak_bytes() const = 0;
  virtual void reset_peak() = 0;
  virtual size_t capacity_bytes() const = 0;
  virtual void set_capacity_bytes(size_t bytes) = 0;
  virtual const std::string& name() const = 0;
  virtual size_t cached_bytes() const = 0;
  virtual void release_cached() = 0;
  // Byte copies between this backend's device and the host (or within the device), and zeroing of
  // its memory: what Tensor::copy_from and Tensor::zeros do for tensors that are not on the host.
  // A copy to the host returns with the bytes there; one to the device may still be queued, ahead
  // of any later work on the device.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) = 0;
  virtual void zero(void* ptr, size_t bytes) = 0;
};

class Allocator {
 public:
  struct Options {
    // 0 = unlimited. Otherwise allocations beyond this many bytes in use throw OutOfMemoryError.
    size_t capacity_bytes = 0;
    // Used in error messages ("rank 3", "emulated H20").
    std::string name = "cpu";
  };

  // A host pool.
  Allocator() : Allocator(Options{}) {}
  explicit Allocator(Options options);
  // A handle on another backend (a GPU's, core/cuda/cuda_tensor_memory.h).
  explicit Allocator(std::shared_ptr<MemoryBackend> backend);
  // Copying shares the pool; there is no move, so no handle is ever left without one.
  Allocator(const Allocator&) = default;
  Allocator& operator=(const Allocator&) = default;
  ~Allocator();

  // The process-wide default allocator, used when no other is given.
  static Allocator& process_default();

  // 64-byte aligned; zero bytes returns a valid unique pointer. Throws OutOfMemoryError.
  void* allocate(size_t bytes);
  // `bytes` must be what allocate was given for ptr.
  void deallocate(void* ptr, size_t bytes) noexcept;

  // Bytes held by live allocations (not the cache).
  size_t current_bytes() const;
  size_t peak_bytes() const;
  void reset_peak();
  size_t capacity_bytes() const;
  void set_capacity_bytes(size_t bytes);
  const std::string& name() const;

  // Bytes in freed blocks kept for reuse.
  size_t cached_bytes() const;
  // Returns every cached block to the system.
  void release_cached();

  // Where the memory lives: Device::cpu() for a host pool.
  Device device() const { return device_; }
  MemoryBackend& backend() const { return *pool_; }

  // Same pool (same device), whichever handles these are.
  bool operator==(const Allocator& other) const { return pool_ == other.pool_; }

 private:
  std::shared_ptr<MemoryBackend> pool_;
  Device device_;  // pool_'s, kept here: Tensor::data() checks it on every access
};

}  // namespace hspmd
