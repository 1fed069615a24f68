// A device for tests without a GPU: host memory that says it is cuda:3 (MemoryBackend,
// core/allocator.h), counting the copies and fills Tensor routes to it. Tensors of an Allocator
// over it behave as a GPU's do for everything above the kernels: data() refuses them, copies to
// and from the host go through the backend.
//
//   auto fake = std::make_shared<FakeDeviceMemory>();
//   Allocator device(fake);
//   Tensor t = host.clone(&device);     // fake->to_device == 1
#pragma once

#include <cstddef>
#include <string>

#include "hspmd/core/allocator.h"

namespace hspmd::testing {

class FakeDeviceMemory final : public MemoryBackend {
 public:
  Device device() const override { return Device{DeviceType::kCUDA, 3}; }
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) noexcept override;
  size_t current_bytes() const override { return in_use; }
  size_t peak_bytes() const override { return 0; }
  void reset_peak() override {}
  size_t capacity_bytes() const override { return 0; }
  void set_capacity_bytes(size_t) override {}
  const std::string& name() const override { return name_; }
  size_t cached_bytes() const override { return 0; }
  void release_cached() override {}
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) override;
  void zero(void* ptr, size_t bytes) override;

  // Not synchronized: for tests whose threads each have their own fake.
  size_t in_use = 0;
  int to_device = 0, to_host = 0, within = 0, zeroed = 0;
  // Box copies a compute over this memory ran on it (runtime/fake_device_compute_testlib.h).
  int region_copies = 0;

 private:
  std::string name_ = "fake cuda:3";
};

}  // namespace hspmd::testing
