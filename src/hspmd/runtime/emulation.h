// Emulated heterogeneous devices on one CPU host (architecture §5): each rank gets a relative speed
// and a memory capacity, so heterogeneous strategies can be exercised and measured on a laptop.
// This is an emulation, and is always reported as one: never presented as GPU results.
//
//   devices.json:
//     {"devices": [{"rank": 0, "name": "fast", "speed": 1.0, "memory": "64MiB"},
//                  {"rank": 1, "name": "slow", "speed": 0.333, "memory": "32MiB"}]}
//   "memory" is bytes (a positive integer) or a string with a unit ("4096B", "64MiB", "1.5GiB";
//   B, KiB, MiB, GiB); absent = unlimited. "speed" is in (0, 1]: 1 = this host's speed; absent = 1.
//   "name" defaults to "rank<r>". Ranks absent from the file run at full speed with no cap. A rank
//   outside [0, world_size) or listed twice, and an unknown key in a device entry, are errors
//   (a misspelled "sped" must not silently mean full speed). Top-level keys besides "devices"
//   (e.g. "comment") are ignored.
//
//   EmulatedDevices devs = EmulatedDevices::from_file("devices.json", /*world_size=*/4);
//   const EmulatedDevice& d = devs.of(rank);
//   ComputePacer pacer(d.speed);                  // runtime/compute_pacer.h: the speed
//   Allocator alloc(d.memory_bytes);              // capacity enforced
// Errors name the file and the key: "devices.json: devices[1].speed: must be in (0, 1], got 3".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hspmd::runtime {

struct EmulatedDevice {
  int rank = 0;
  std::string name;          // for logs ("H20-like"); default "rank<r>"
  double speed = 1.0;        // relative compute speed, (0, 1]
  int64_t memory_bytes = 0;  // allocator capacity; 0 = unlimited
};

class EmulatedDevices {
 public:
  // One full-speed, unlimited device per rank.
  explicit EmulatedDevices(int world_size);
  static EmulatedDevices from_file(const std::string& path, int world_size);
  static EmulatedDevices from_json_text(const std::string& text, const std::string& source, int world_size);
  const EmulatedDevice& of(int rank) const;
  int world_size() const { return static_cast<int>(devices_.size()); }
  // "emulated devices: rank 0 fast speed 1.00 memory 64.0 MiB; rank 1 ..." (the log line).
  std::string describe() const;

 private:
  std::vector<EmulatedDevice> devices_;
};

}  // namespace hspmd::runtime
