// `hspmd cluster --kinds H800:384,H20:640 --like REFERENCE.json --per-node 8 --out C.json`: writes
// the spec of a large heterogeneous cluster (planner/cluster_generator.h) whose device kinds take
// their memory, peak FLOP/s and intra-node bandwidth from a reference spec, for planning at scale:
//
//   hspmd cluster --kinds H800:384,H20:640 --like examples/clusters/paper-16h800-32h20.json
//       --out runs/cluster-1024.json
//   hspmd plan --model configs/llama-32b.json --cluster runs/cluster-1024.json
//       --profile examples/profiles/paper-h800-h20-llama-32b.json --global-batch 1024 --seq-len 4096 ...
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>

#include "hspmd/core/atomic_file.h"
#include "hspmd/planner/cluster_generator.h"
#include "hspmd/resolve/topology.h"

namespace hspmd::cli {

namespace {

struct ClusterOptions {
  std::string kinds, like, out, name;
  int per_node = 8;
  double inter_node_bandwidth = 0;
};

void run_cluster(const ClusterOptions& o) {
  const resolve::Topology reference = resolve::Topology::from_file(o.like);
  planner::ClusterRecipe recipe = planner::recipe_like(reference, planner::parse_kind_counts(o.kinds));
  recipe.devices_per_node = o.per_node;
  if (o.inter_node_bandwidth > 0) recipe.inter_node_bandwidth = o.inter_node_bandwidth;
  int total = 0;
  for (const auto& k : recipe.kinds) total += k.count;
  recipe.name = o.name.empty() ? "generated-" + std::to_string(total) : o.name;
  const std::string text = planner::cluster_json(recipe) + "\n";
  // Parse what was written, so that a spec the topology would refuse is never written.
  const resolve::Topology check = resolve::Topology::from_json_text(text, o.out);
  AtomicFile out(o.out);
  out.write(text.data(), text.size());
  out.commit();
  std::cout << "wrote " << o.out << ": " << check.num_devices() << " devices";
  for (const auto& k : recipe.kinds) {
    std::cout << ", " << k.count << " " << k.type << " (" << k.memory / (1 << 30) << " GiB, "
              << k.intra_node_bandwidth / 1e9 << " GB/s in a node)";
  }
  std::cout << ", " << recipe.devices_per_node << " a node, " << recipe.inter_node_bandwidth / 1e9
            << " GB/s between nodes\n";
}

}  // namespace

void add_cluster_command(CLI::App& app) {
  auto opts = std::make_shared<ClusterOptions>();
  CLI::App* cmd = app.add_subcommand("cluster", "Generate the spec of a large heterogeneous cluster for planning at scale");
  cmd->add_option("--kinds", opts->kinds, "device kinds and counts, TYPE:COUNT[,TYPE:COUNT...], e.g. H800:384,H20:640")
      ->required();
  cmd->add_option("--like", opts->like,
                  "reference cluster spec: each TYPE's memory, peak FLOP/s and intra-node bandwidth, and the "
                  "inter-node bandwidth, are taken from it")
      ->required();
  cmd->add_option("--per-node", opts->per_node, "devices per node (each kind fills its own nodes)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--inter-node-bandwidth", opts->inter_node_bandwidth,
                  "bytes/s between nodes (default: the reference's)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--name", opts->name, "the cluster's name (default generated-<devices>)");
  cmd->add_option("--out", opts->out, "where to write the cluster spec JSON")->required();
  cmd->callback([opts] { run_cluster(*opts); });
}

}  // namespace hspmd::cli
