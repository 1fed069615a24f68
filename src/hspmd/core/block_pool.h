// A caching pool of device memory, independent of the device: blocks come from a RawMemory (the
// CUDA backend's is cudaMalloc/cudaFree, core/cuda/cuda_allocator.h; tests use a fake), are
// rounded up to the size classes of the host allocator (core/size_class.h), and a freed block is
// kept for the next request of its size class on the same stream.
//
//   BlockPool pool(std::make_unique<CudaMemory>(0), {.capacity_bytes = 80ull << 30});  // an 80 GB card
//   void* p = pool.allocate(4096, stream);   // stream: the CUDA stream the block is used on
//   pool.deallocate(p);                       // back to the cache of (stream, 4096)
//   pool.stats().reserved_bytes;               // taken from the device: live and cached blocks
//
// Why per stream: a block freed while kernels queued on its stream may still read it is safe to
// hand out again on that stream (the stream runs in order), but not on another one. A block used
// on a second stream must be freed only after that stream's work is ordered before the owner's
// (an event the owner waits on, core/cuda/stream.h).
//
// Why cached blocks stay until memory runs short (unlike the host allocator, which bounds its
// cache): cudaMalloc and cudaFree synchronize the device, so a training step must not call them;
// after the first step every request is served from the cache. Under pressure (the capacity, or
// the device itself returning no memory) the blocks freed longest ago, of every stream, go back to
// the device first, then the request is tried again.
//
// Statistics (stats()): current_bytes is what live allocations requested (what tensors hold; the
// figure memory reports and the planner's estimates compare against), peak_bytes its high-water
// mark, reserved_bytes what the device has handed the pool (live blocks with their size-class
// rounding, and the cache), peak_reserved_bytes its high-water mark.
//
// A capacity emulates a smaller card: a request that would take current_bytes, or reserved bytes
// after the cache is emptied, past it throws OutOfMemoryError naming the requested, in-use and
// capacity bytes, as does a request the device itself cannot serve (with the device's memory as
// the capacity).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace hspmd {

// Where a pool's blocks come from. Implementations need not be thread-safe: the pool calls them
// under its lock.
class RawMemory {
 public:
  virtual ~RawMemory() = default;
  // `bytes` (a size class, > 0) of fresh memory, or nullptr when the device has no more. Other
  // failures (a broken device) throw Error.
  virtual void* allocate(size_t bytes) = 0;
  virtual void free(void* ptr) noexcept = 0;
  // The device's total memory: the capacity an out-of-memory error names when no cap is set.
  virtual size_t total_bytes() const = 0;
  // The device in error messages: "cuda:0".
  virtual std::string name() const = 0;
};

// The stream a block is used on, as an integer (a cudaStream_t's address; 0 the default stream).
using StreamKey = uintptr_t;

struct BlockPoolStats {
  size_t current_bytes = 0;        // requested bytes of live allocations
  size_t peak_bytes = 0;           // of current_bytes, since reset_peak()
  size_t reserved_bytes = 0;       // block bytes taken from the device: live + cached
  size_t peak_reserved_bytes = 0;  // of reserved_bytes, since reset_peak()
  size_t cached_bytes = 0;         // block bytes of freed blocks kept for reuse
  int64_t device_allocations = 0;  // blocks taken from the device (a reused block is not one)
  int64_t device_frees = 0;        // blocks given back to the device
};

class BlockPool {
 public:
  struct Options {
    // 0: the device's memory is the limit. Otherwise the most bytes the pool may hold in use and
    // reserve (emulates a card with this much memory).
    size_t capacity_bytes = 0;
    // Names the pool in error messages ("rank 3 on cuda:0"); empty: the RawMemory's name.
    std::string name;
  };

  BlockPool(std::unique_ptr<RawMemory> memory, Options options);
  // Gives every cached block back. Blocks still live then are leaked, not freed under their user.
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A block of at least `bytes` (0 allowed: a unique smallest block) for use on `stream`.
  // Throws OutOfMemoryError.
  void* allocate(size_t bytes, StreamKey stream);
  // `ptr` must come from allocate and not be freed yet (an Error names it otherwise).
  void deallocate(void* ptr);

  BlockPoolStats stats() const;
  void reset_peak();
  size_t capacity_bytes() const;
  // Lowering the capacity below the bytes in use is allowed: later requests fail until they fall.
  void set_capacity_bytes(size_t bytes);
  const std::string& name() const { return name_; }
  // Gives every cached block back to the device.
  void release_cached();

 private:
  struct Live {
    size_t bytes;  // requested
    size_t block;  // size class
    StreamKey stream;
  };
  struct Cached {
    void* ptr;
    size_t block;
    StreamKey stream;
  };
  using CacheKey = std::pair<StreamKey, size_t>;  // (stream, size class)
  using Age = std::list<Cached>::iterator;

  void* take_cached(const CacheKey& key);
  // Gives cached blocks back, freed longest ago first, until the cache holds at most max_cached.
  void evict_until(size_t max_cached) noexcept;
  [[noreturn]] void throw_out_of_memory(size_t bytes, size_t capacity) const;

  std::unique_ptr<RawMemory> memory_;
  std::string name_;
  mutable std::mutex mu_;
  size_t capacity_ = 0;
  BlockPoolStats stats_;
  std::unordered_map<void*, Live> live_;
  std::list<Cached> by_age_;                   // freed longest ago first
  std::map<CacheKey, std::list<Age>> by_key_;  // each key's blocks, freed longest ago first
};

}  // namespace hspmd
