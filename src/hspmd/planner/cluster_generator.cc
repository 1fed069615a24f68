#include "hspmd/planner/cluster_generator.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "hspmd/core/error.h"

namespace hspmd::planner {

std::vector<std::pair<std::string, int>> parse_kind_counts(const std::string& text) {
  std::vector<std::pair<std::string, int>> out;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const size_t colon = item.find(':');
    HSPMD_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < item.size())
        << "kinds: '" << item << "' is not TYPE:COUNT (e.g. H800:384)";
    int count = 0;
    try {
      size_t used = 0;
      count = std::stoi(item.substr(colon + 1), &used);
      HSPMD_CHECK(used == item.size() - colon - 1) << "trailing characters";
    } catch (const std::exception&) {
      HSPMD_THROW() << "kinds: '" << item << "': the count is not an integer";
    }
    HSPMD_CHECK(count > 0) << "kinds: '" << item << "': the count must be positive";
    out.push_back({item.substr(0, colon), count});
  }
  HSPMD_CHECK(!out.empty()) << "kinds: empty, expected TYPE:COUNT[,TYPE:COUNT...]";
  return out;
}

ClusterRecipe recipe_like(const resolve::Topology& reference, const std::vector<std::pair<std::string, int>>& counts) {
  ClusterRecipe r;
  const int n = reference.num_devices();
  for (int d = 1; d < n; ++d) {
    if (reference.device(d).node != reference.device(0).node) {
      r.inter_node_bandwidth = reference.bandwidth(0, d);
      break;
    }
  }
  for (const auto& [type, count] : counts) {
    GeneratedKind k;
    k.type = type;
    k.count = count;
    int first = -1;
    for (int d = 0; d < n; ++d) {
      if (reference.device(d).type != type) continue;
      if (first < 0) {
        first = d;
        k.memory = reference.device(d).memory;
        k.peak_flops = reference.device(d).peak_flops;
      } else if (reference.device(d).node == reference.device(first).node) {
        k.intra_node_bandwidth = reference.bandwidth(first, d);
        break;
      }
    }
    HSPMD_CHECK(first >= 0) << "kinds: the reference cluster " << reference.name() << " has no device of type '"
                            << type << "'";
    if (k.intra_node_bandwidth == 0) k.intra_node_bandwidth = r.inter_node_bandwidth;  // one per node there
    r.kinds.push_back(k);
  }
  return r;
}

std::string cluster_json(const ClusterRecipe& recipe) {
  HSPMD_CHECK(recipe.devices_per_node > 0) << "cluster generator: devices per node must be positive, got "
                                           << recipe.devices_per_node;
  HSPMD_CHECK(!recipe.kinds.empty()) << "cluster generator: no device kinds";
  nlohmann::json j;
  j["name"] = recipe.name;
  std::ostringstream comment;
  comment << "Generated:";
  nlohmann::json devices = nlohmann::json::array();
  nlohmann::json intra = nlohmann::json::object();
  int id = 0, node = 0;
  for (const GeneratedKind& k : recipe.kinds) {
    HSPMD_CHECK(k.count > 0 && k.intra_node_bandwidth > 0)
        << "cluster generator: kind " << k.type << " needs a positive count and intra-node bandwidth";
    HSPMD_CHECK(!intra.contains(k.type)) << "cluster generator: kind " << k.type << " given twice";
    intra[k.type] = k.intra_node_bandwidth;
    comment << " " << k.count << " " << k.type << " (nodes " << node << "-"
            << node + (k.count + recipe.devices_per_node - 1) / recipe.devices_per_node - 1 << ")";
    for (int i = 0; i < k.count; ++i, ++id) {
      nlohmann::json d = {{"id", id}, {"node", node + i / recipe.devices_per_node}, {"type", k.type}};
      if (k.memory > 0) d["memory"] = k.memory;
      if (k.peak_flops > 0) d["peak_flops"] = k.peak_flops;
      devices.push_back(std::move(d));
    }
    node += (k.count + recipe.devices_per_node - 1) / recipe.devices_per_node;
  }
  comment << ", " << recipe.devices_per_node << " a node.";
  j["comment"] = comment.str();
  j["devices"] = std::move(devices);
  j["intra_node_bandwidth"] = std::move(intra);
  j["inter_node_bandwidth"] = recipe.inter_node_bandwidth;
  return j.dump(1);
}

}  // namespace hspmd::planner
