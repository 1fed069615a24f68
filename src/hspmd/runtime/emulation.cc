#include "hspmd/runtime/emulation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <thread>

#include "hspmd/core/byte_size.h"
#include "hspmd/core/error.h"
#include "hspmd/core/json_file.h"

namespace hspmd::runtime {

namespace {

int64_t parse_memory(const nlohmann::json& v, const std::string& where) {
  if (v.is_string()) return parse_bytes(v.get<std::string>(), where);
  // An explicit 0 is refused: "unlimited" is spelled by leaving the key out, so a typo cannot
  // silently lift the cap.
  HSPMD_CHECK(v.is_number_integer() && v.get<long long>() > 0)
      << where << ": expected a positive number of bytes or a size like \"64MiB\", got " << v.dump();
  return v.get<int64_t>();
}

std::string capacity_text(int64_t bytes) { return bytes == 0 ? "unlimited" : format_bytes(bytes); }

EmulatedDevice default_device(int rank) {
  EmulatedDevice d;
  d.rank = rank;
  d.name = "rank" + std::to_string(rank);
  return d;
}

}  // namespace

EmulatedDevices::EmulatedDevices(int world_size) {
  HSPMD_CHECK(world_size > 0) << "emulated devices: world size must be positive, got " << world_size;
  devices_.reserve(world_size);
  for (int r = 0; r < world_size; ++r) devices_.push_back(default_device(r));
}

EmulatedDevices EmulatedDevices::from_file(const std::string& path, int world_size) {
  return from_json_text(read_text_file(path, "devices file"), path, world_size);
}

EmulatedDevices EmulatedDevices::from_json_text(const std::string& text, const std::string& source,
                                                int world_size) {
  EmulatedDevices result(world_size);
  const nlohmann::json root = parse_json_object(text, source);
  const nlohmann::json& list = json_member(root, "devices", source);
  HSPMD_CHECK(list.is_array()) << source << ": devices: expected an array, got " << list.dump();
  std::vector<bool> seen(world_size, false);
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = source + ": devices[" + std::to_string(i) + "]";
    const nlohmann::json& entry = list[i];
    HSPMD_CHECK(entry.is_object()) << where << ": expected an object, got " << entry.dump();
    // Unknown keys are refused so that a misspelled "sped" cannot silently mean full speed.
    for (auto it = entry.begin(); it != entry.end(); ++it) {
      const std::string& key = it.key();
      HSPMD_CHECK(key == "rank" || key == "name" || key == "speed" || key == "memory")
          << where << "." << key << ": unknown key (expected rank, name, speed, memory)";
    }
    const nlohmann::json& rank_json = json_member(entry, "rank", where);
    HSPMD_CHECK(rank_json.is_number_integer()) << where << ".rank: expected an integer, got " << rank_json.dump();
    const long long rank = rank_json.get<long long>();
    HSPMD_CHECK(rank >= 0 && rank < world_size)
        << where << ".rank: " << rank << " is out of range [0, " << world_size << ")";
    HSPMD_CHECK(!seen[rank]) << where << ".rank: rank " << rank << " is listed twice";
    seen[rank] = true;

    EmulatedDevice d = default_device(static_cast<int>(rank));
    if (auto it = entry.find("name"); it != entry.end()) {
      HSPMD_CHECK(it->is_string() && !it->get<std::string>().empty())
          << where << ".name: expected a non-empty string, got " << it->dump();
      d.name = it->get<std::string>();
    }
    if (auto it = entry.find("speed"); it != entry.end()) {
      HSPMD_CHECK(it->is_number()) << where << ".speed: expected a number, got " << it->dump();
      d.speed = it->get<double>();
      HSPMD_CHECK(d.speed > 0 && d.speed <= 1) << where << ".speed: must be in (0, 1], got " << it->dump();
    }
    if (auto it = entry.find("memory"); it != entry.end()) d.memory_bytes = parse_memory(*it, where + ".memory");
    result.devices_[rank] = d;
  }
  return result;
}

const EmulatedDevice& EmulatedDevices::of(int rank) const {
  HSPMD_CHECK(rank >= 0 && rank < world_size())
      << "emulated devices: rank " << rank << " is out of range [0, " << world_size() << ")";
  return devices_[rank];
}

std::string EmulatedDevices::describe() const {
  std::ostringstream out;
  out << "emulated devices:";
  for (size_t i = 0; i < devices_.size(); ++i) {
    const EmulatedDevice& d = devices_[i];
    char speed[32];
    std::snprintf(speed, sizeof(speed), "%.2f", d.speed);
    out << (i == 0 ? " " : "; ") << "rank " << d.rank << " " << d.name << " speed " << speed << " memory "
        << capacity_text(d.memory_bytes);
  }
  return out.str();
}

}  // namespace hspmd::runtime
