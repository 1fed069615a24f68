// Host memory with per-allocator accounting. Each process (or each emulated device when ranks run
// as threads) owns one Allocator; a capacity emulates a device with less memory:
//
//   Allocator device_memory(Allocator::Options{.capacity_bytes = 2 << 30});
//   Tensor t = Tensor::empty({1024, 1024}, DType::kFloat32, &device_memory);
//   device_memory.peak_bytes();  // high-water mark, for memory reports
//
// Exceeding the capacity throws OutOfMemoryError naming the requested, in-use and capacity bytes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
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
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // The process-wide default allocator, used when no other is given.
  static Allocator& process_default();

  // 64-byte aligned; zero bytes returns a valid unique pointer. Throws OutOfMemoryError.
  void* allocate(size_t bytes);
  void deallocate(void* ptr, size_t bytes) noexcept;

  size_t current_bytes() const { return current_.load(); }
  size_t peak_bytes() const { return peak_.load(); }
  void reset_peak() { peak_.store(current_.load()); }
  size_t capacity_bytes() const { return options_.capacity_bytes; }
  void set_capacity_bytes(size_t bytes) { options_.capacity_bytes = bytes; }
  const std::string& name() const { return options_.name; }

 private:
  Options options_;
  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};
};

}  // namespace hspmd
