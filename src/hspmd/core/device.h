// Where memory lives: the host (kCPU) or a CUDA GPU (kCUDA: core/cuda/ memory, streams and copies,
// kernels/cuda/ kernels; built with HSPMD_CUDA). A tensor's device is its allocator's
// (core/allocator.h).
#pragma once

#include <string>

namespace hspmd {

enum class DeviceType { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;  // which GPU for kCUDA; always 0 for kCPU

  static Device cpu() { return Device{}; }
  // "cpu", "cuda" (GPU 0) or "cuda:N"; anything else is an Error naming --device and the choices.
  static Device parse(const std::string& text);
  std::string to_string() const;  // "cpu", "cuda:1"
  friend bool operator==(const Device&, const Device&) = default;
};

}  // namespace hspmd
