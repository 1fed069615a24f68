#include "hspmd/core/device.h"

#include <cstdlib>

#include "hspmd/core/error.h"

namespace hspmd {

std::string Device::to_string() const {
  switch (type) {
    case DeviceType::kCPU: return "cpu";
    case DeviceType::kCUDA: return "cuda:" + std::to_string(index);
  }
  return "unknown";
}

Device Device::parse(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device{DeviceType::kCUDA, 0};
  if (text.rfind("cuda:", 0) == 0) {
    const std::string index = text.substr(5);
    char* end = nullptr;
    const long n = std::strtol(index.c_str(), &end, 10);
    if (!index.empty() && *end == '\0' && n >= 0 && n < 1024) return Device{DeviceType::kCUDA, static_cast<int>(n)};
  }
  HSPMD_THROW() << "--device " << text << ": expected cpu, cuda or cuda:N";
}

}  // namespace hspmd
