#include "hspmd/resolve/topology.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "hspmd/core/error.h"
#include "hspmd/core/json_file.h"

namespace hspmd::resolve {

std::string_view link_tier_name(LinkTier tier) {
  switch (tier) {
    case LinkTier::kLocal: return "local";
    case LinkTier::kIntraNode: return "intra-node";
    case LinkTier::kInterNode: return "inter-node";
  }
  return "?";
}

Topology Topology::uniform(int n, double bandwidth) {
  HSPMD_CHECK(n > 0 && bandwidth > 0) << "uniform topology needs n > 0 devices and a positive bandwidth";
  Topology t;
  t.name_ = "uniform-" + std::to_string(n);
  for (int i = 0; i < n; ++i) t.devices_.push_back({i, 0, "device", 0, 0});
  t.matrix_.assign(static_cast<size_t>(n) * n, bandwidth);
  t.uniform_inter_node_ = bandwidth;  // one node: no inter-node link, so any value holds
  return t;
}

const DeviceSpec& Topology::device(int id) const {
  HSPMD_CHECK(id >= 0 && id < num_devices()) << "device " << id << " is not in topology " << name_ << " ("
                                             << num_devices() << " devices)";
  return devices_[id];
}

double Topology::bandwidth(int a, int b) const {
  device(a);
  device(b);
  if (a == b) return std::numeric_limits<double>::infinity();
  return matrix_[static_cast<size_t>(a) * num_devices() + b];
}

LinkTier Topology::tier(int a, int b) const {
  if (a == b) return LinkTier::kLocal;
  return device(a).node == device(b).node ? LinkTier::kIntraNode : LinkTier::kInterNode;
}

namespace {

using Json = nlohmann::json;

double positive_number(const Json& v, const std::string& where) {
  HSPMD_CHECK(v.is_number() && v.get<double>() > 0) << where << ": expected a positive number, got " << v.dump();
  return v.get<double>();
}

}  // namespace

Topology Topology::from_json_text(const std::string& text, const std::string& source) {
  Json j = parse_json_object(text, source);
  Topology t;
  t.name_ = j.contains("name") && j["name"].is_string() ? j["name"].get<std::string>() : source;
  HSPMD_CHECK(j.contains("devices") && j["devices"].is_array() && !j["devices"].empty())
      << source << ": \"devices\" must be a non-empty array";
  const Json& devs = j["devices"];
  const int n = static_cast<int>(devs.size());
  t.devices_.resize(n);
  std::vector<bool> seen(n, false);
  for (int i = 0; i < n; ++i) {
    const std::string where = source + ": devices[" + std::to_string(i) + "]";
    const Json& d = devs[i];
    HSPMD_CHECK(d.is_object() && d.contains("id") && d["id"].is_number_integer())
        << where << ": needs an integer \"id\"";
    const int id = d["id"].get<int>();
    HSPMD_CHECK(id >= 0 && id < n && !seen[id]) << where << ".id: " << id << " must be unique and in 0.." << n - 1;
    seen[id] = true;
    DeviceSpec spec;
    spec.id = id;
    HSPMD_CHECK(d.contains("node") && d["node"].is_number_integer() && d["node"].get<int>() >= 0)
        << where << ": needs a non-negative integer \"node\"";
    spec.node = d["node"].get<int>();
    HSPMD_CHECK(d.contains("type") && d["type"].is_string()) << where << ": needs a string \"type\"";
    spec.type = d["type"].get<std::string>();
    if (d.contains("memory")) spec.memory = positive_number(d["memory"], where + ".memory");
    if (d.contains("peak_flops")) spec.peak_flops = positive_number(d["peak_flops"], where + ".peak_flops");
    t.devices_[id] = spec;
  }
  t.matrix_.assign(static_cast<size_t>(n) * n, 0.0);
  if (j.contains("bandwidth_matrix")) {
    const Json& m = j["bandwidth_matrix"];
    HSPMD_CHECK(m.is_array() && static_cast<int>(m.size()) == n)
        << source << ": \"bandwidth_matrix\" must have " << n << " rows";
    for (int a = 0; a < n; ++a) {
      HSPMD_CHECK(m[a].is_array() && static_cast<int>(m[a].size()) == n)
          << source << ": bandwidth_matrix[" << a << "] must have " << n << " entries";
      for (int b = 0; b < n; ++b) {
        if (a == b) continue;
        t.matrix_[static_cast<size_t>(a) * n + b] = positive_number(
            m[a][b], source + ": bandwidth_matrix[" + std::to_string(a) + "][" + std::to_string(b) + "]");
      }
    }
    return t;
  }
  HSPMD_CHECK(j.contains("intra_node_bandwidth")) << source << ": missing \"intra_node_bandwidth\" (or a \"bandwidth_matrix\")";
  HSPMD_CHECK(j.contains("inter_node_bandwidth")) << source << ": missing \"inter_node_bandwidth\" (or a \"bandwidth_matrix\")";
  const Json& intra = j["intra_node_bandwidth"];
  const double inter = positive_number(j["inter_node_bandwidth"], source + ": inter_node_bandwidth");
  auto intra_of = [&](const std::string& type) {
    if (intra.is_number()) return positive_number(intra, source + ": intra_node_bandwidth");
    HSPMD_CHECK(intra.is_object() && intra.contains(type))
        << source << ": intra_node_bandwidth has no entry for device type \"" << type << "\"";
    return positive_number(intra[type], source + ": intra_node_bandwidth." + type);
  };
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      const DeviceSpec &da = t.devices_[a], &db = t.devices_[b];
      t.matrix_[static_cast<size_t>(a) * n + b] =
          da.node == db.node ? std::min(intra_of(da.type), intra_of(db.type)) : inter;
    }
  }
  t.uniform_inter_node_ = inter;
  return t;
}

Topology Topology::from_file(const std::string& path) {
  return from_json_text(read_text_file(path, "cluster spec"), path);
}

}  // namespace hspmd::resolve
