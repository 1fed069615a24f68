// Topology: the devices of a cluster and the point-to-point bandwidth between any two of them,
// read from a cluster spec JSON. Used by the BSR scheme (fastest link first) and by `hspmd
// explain` (bytes per link tier).
//
// Cluster spec schema (bandwidths in bytes/s, memory in bytes, peak in FLOP/s):
//   {
//     "name": "local-cpu-4",
//     "devices": [ {"id": 0, "node": 0, "type": "cpu", "memory": 8e9, "peak_flops": 1e11}, ... ],
//     "intra_node_bandwidth": 1e10,              // a number, or per device type:
//                                                // {"H800": 4e11, "H20": 9e11} (a node mixing types
//                                                // gets the slower of the two)
//     "inter_node_bandwidth": 5e10,
//     "bandwidth_matrix": [[...], ...]           // optional: explicit n x n matrix, overrides both
//   }
// Device ids must be 0..n-1 (they are the ranks). Errors name the file and the key at fault.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hspmd::resolve {

struct DeviceSpec {
  int id = 0;
  int node = 0;
  std::string type;
  double memory = 0;      // bytes
  double peak_flops = 0;  // FLOP/s
};

enum class LinkTier { kLocal, kIntraNode, kInterNode };
std::string_view link_tier_name(LinkTier tier);  // "local", "intra-node", "inter-node"

class Topology {
 public:
  // n devices on one node, every link `bandwidth` bytes/s.
  static Topology uniform(int n, double bandwidth);
  static Topology from_json_text(const std::string& text, const std::string& source);
  static Topology from_file(const std::string& path);

  const std::string& name() const { return name_; }
  int num_devices() const { return static_cast<int>(devices_.size()); }
  const DeviceSpec& device(int id) const;
  // Bytes/s from a to b; infinite for a == b.
  double bandwidth(int a, int b) const;
  LinkTier tier(int a, int b) const;
  // The bandwidth of every link between two nodes when the spec gives one inter_node_bandwidth
  // (or there is one node); empty for an explicit bandwidth_matrix. Lets a BSR scheme pick the
  // best remote sender without reading one matrix entry per owner (resolve/bsr_scheme.cc).
  std::optional<double> uniform_inter_node_bandwidth() const { return uniform_inter_node_; }

 private:
  std::string name_;
  std::vector<DeviceSpec> devices_;
  std::vector<double> matrix_;  // n x n, row = sender
  std::optional<double> uniform_inter_node_;
};

}  // namespace hspmd::resolve
