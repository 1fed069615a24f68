#include "core/fake_device_testlib.h"

#include <cstdlib>
#include <cstring>

namespace hspmd::testing {

void* FakeDeviceMemory::allocate(size_t bytes) {
  in_use += bytes;
  return std::malloc(bytes == 0 ? 1 : bytes);
}

void FakeDeviceMemory::deallocate(void* ptr, size_t bytes) noexcept {
  in_use -= bytes;
  std::free(ptr);
}

void FakeDeviceMemory::copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (src_device.type == DeviceType::kCPU) ++to_device;
  if (dst_device.type == DeviceType::kCPU) ++to_host;
  if (src_device == device() && dst_device == device()) ++within;
  std::memmove(dst, src, bytes);
}

void FakeDeviceMemory::zero(void* ptr, size_t bytes) {
  ++zeroed;
  std::memset(ptr, 0, bytes);
}

}  // namespace hspmd::testing
