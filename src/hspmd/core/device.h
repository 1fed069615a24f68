// Where a tensor's storage lives. Only the CPU backend exists today; kCUDA is reserved so the
// enum and every switch over it already have room for the GPU backend.
#pragma once

#include <string>

namespace hspmd {

enum class DeviceType { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;  // which GPU for kCUDA; always 0 for kCPU

  static Device cpu() { return Device{}; }
  std::string to_string() const;  // "cpu", "cuda:1"
  friend bool operator==(const Device&, const Device&) = default;
};

}  // namespace hspmd
