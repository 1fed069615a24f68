// Cluster generator: cluster specs (resolve/topology.h) for large heterogeneous clusters that no
// file describes yet, for planning at scale (`hspmd cluster`, bench/planner_scale_bench.cc).
//
//   ClusterRecipe r = recipe_like(Topology::from_file("examples/clusters/paper-16h800-32h20.json"),
//                                 parse_kind_counts("H800:384,H20:640"));
//   r.devices_per_node = 8;
//   Topology t = Topology::from_json_text(cluster_json(r), "generated");
//
// Devices are numbered kind by kind in the recipe's order; each kind fills its own nodes of
// devices_per_node (its last node may be partial), so a node never mixes kinds. Links have the
// spec's two tiers: within a node the kind's intra-node bandwidth (NVLink), across nodes one
// inter-node bandwidth (the NICs).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "hspmd/resolve/topology.h"

namespace hspmd::planner {

struct GeneratedKind {
  std::string type;  // the spec's "type", also the profile's device kind
  int count = 0;
  double memory = 0;                // bytes per device
  double peak_flops = 0;            // FLOP/s per device
  double intra_node_bandwidth = 0;  // bytes/s between two devices of one node
};

struct ClusterRecipe {
  std::string name = "generated";
  std::vector<GeneratedKind> kinds;
  int devices_per_node = 8;
  double inter_node_bandwidth = 50e9;  // bytes/s between nodes
};

// "H800:384,H20:640" -> {{"H800", 384}, {"H20", 640}}. Error naming the item at fault.
std::vector<std::pair<std::string, int>> parse_kind_counts(const std::string& text);

// A recipe with these counts whose kinds take their memory, peak and intra-node bandwidth from the
// devices of that type in `reference`, and the inter-node bandwidth from two of its nodes (kept at
// the default when it has one node). Error naming a type the reference lacks.
ClusterRecipe recipe_like(const resolve::Topology& reference, const std::vector<std::pair<std::string, int>>& counts);

// The cluster spec JSON (the format Topology::from_json_text reads).
std::string cluster_json(const ClusterRecipe& recipe);

}  // namespace hspmd::planner
