// Host memory with per-allocator accounting and a cache of freed blocks. Each process (or each
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
// Cache (why: a fresh block is page-faulted in on first touch, and glibc unmaps large blocks on
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

namespace hspmd {

class Allocator {
 public:
  struct Options {
    // 0 = unlimited. Otherwise allocations beyond this many bytes in use throw OutOfMemoryError.
    size_t capacity_bytes = 0;
    // Used in error messages ("rank 3", "emulated H20").
    std::string name = "cpu";
  };

  Allocator() : Allocator(Options{}) {}
  explicit Allocator(Options options);
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

  // Same pool (same device), whichever handles these are.
  bool operator==(const Allocator& other) const { return pool_ == other.pool_; }

 private:
  class Pool;
  std::shared_ptr<Pool> pool_;
};

}  // namespace hspmd
