#include "hspmd/core/device.h"

namespace hspmd {

std::string Device::to_string() const {
  switch (type) {
    case DeviceType::kCPU: return "cpu";
    case DeviceType::kCUDA: return "cuda:" + std::to_string(index);
  }
  return "unknown";
}

}  // namespace hspmd
