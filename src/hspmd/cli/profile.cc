// `hspmd profile --model CONFIG --out P.json [--devices D.json]`: measures one decoder layer, the
// embedding and head, and the links of this host (planner/profiler.h) and writes the fitted
// profile the cost model and `hspmd plan` read. With --devices, every emulated device name becomes
// a device kind (its times the host's divided by its speed; CPU emulation, not GPUs).
//
//   hspmd profile --model configs/llama-tiny.json --devices examples/devices/local-hetero-4.json
//       --out runs/profile-tiny.json                                    (one line)
//
// `--from-cluster C.json [--efficiency 0.45]` derives a profile from the cluster spec's datasheet
// figures instead (planner/derived_profile.h), for clusters this host cannot reach.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "hspmd/core/atomic_file.h"
#include "hspmd/core/elapsed.h"
#include "hspmd/core/error.h"
#include "hspmd/core/json_file.h"
#include "hspmd/models/model_factory.h"
#include "hspmd/planner/derived_profile.h"
#include "hspmd/resolve/topology.h"
#include "hspmd/runtime/emulation.h"
#include "hspmd/tuning/profiler.h"

namespace hspmd::cli {

namespace {

struct ProfileOptions {
  std::string model, out, devices, kind = "cpu", from_cluster;
  double efficiency = 0.45;
  std::vector<int> tp_degrees;
  std::vector<int64_t> seq_lens;
  std::vector<int> micro_batch_sizes{1, 2};
  int repeats = 3;
};

void write_profile(const planner::Profile& p, const std::string& path) {
  const std::string text = p.to_json_text();
  AtomicFile out(path);
  out.write(text.data(), text.size());
  out.commit();
}

void run_profile(const ProfileOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  const std::shared_ptr<const models::Model> model = models::load_model(o.model);
  if (!o.from_cluster.empty()) {
    HSPMD_CHECK(o.devices.empty()) << "profile: --from-cluster derives figures; --devices measures: give one";
    const resolve::Topology cluster = resolve::Topology::from_file(o.from_cluster);
    const planner::Profile p = planner::derive_profile(
        *model, cluster, {.model = o.model, .efficiency = o.efficiency, .cluster = o.from_cluster});
    write_profile(p, o.out);
    std::cout << "derived (not measured) a profile of " << o.model << " from " << o.from_cluster << "; wrote " << o.out
              << "\n";
    return;
  }
  std::optional<runtime::EmulatedDevices> devices;
  if (!o.devices.empty()) {
    // The file names ranks; the world is as large as its highest rank.
    const nlohmann::json j = parse_json_object(read_text_file(o.devices, "emulated devices file"), o.devices);
    int world = 1;
    for (const nlohmann::json& d : json_member(j, "devices", o.devices)) {
      if (d.contains("rank") && d["rank"].is_number_integer()) world = std::max(world, d["rank"].get<int>() + 1);
    }
    devices = runtime::EmulatedDevices::from_file(o.devices, world);
  }
  tuning::ProfilerOptions po;
  po.model = o.model;
  po.tp_degrees = o.tp_degrees;
  po.seq_lens = o.seq_lens;
  po.micro_batch_sizes = o.micro_batch_sizes;
  po.repeats = o.repeats;
  po.kind = o.kind;
  po.devices = devices ? &*devices : nullptr;
  po.progress = [](const std::string& line) { std::cerr << line << std::flush; };
  const planner::Profile p = tuning::profile_host(*model, po);
  write_profile(p, o.out);
  const double s = seconds_since(start);
  std::cout << "profiled " << o.model << " (" << p.source << ") in " << s << " s; wrote " << o.out << "\n";
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto opts = std::make_shared<ProfileOptions>();
  CLI::App* cmd =
      app.add_subcommand("profile", "Measure compute, memory and links on this host and fit the planner's cost model");
  cmd->add_option("--model", opts->model, "model config.json (Hugging Face style)")->required();
  cmd->add_option("--out", opts->out, "where to write the profile JSON")->required();
  cmd->add_option("--devices", opts->devices, "emulated devices JSON: one device kind per device name (CPU emulation)");
  cmd->add_option("--kind", opts->kind, "device kind name without --devices (the cluster spec's \"type\")")
      ->capture_default_str();
  cmd->add_option("--from-cluster", opts->from_cluster,
                  "derive the figures from this cluster spec's peak_flops and memory instead of measuring "
                  "(for clusters this host cannot reach; labelled as derived)");
  cmd->add_option("--efficiency", opts->efficiency, "--from-cluster: achieved fraction of peak FLOP/s")
      ->capture_default_str();
  cmd->add_option("--tp", opts->tp_degrees, "TP degrees (default: powers of two up to the host's cores)")
      ->delimiter(',');
  cmd->add_option("--seq-lens", opts->seq_lens, "sequence lengths (default 64,128,256)")->delimiter(',');
  cmd->add_option("--micro-batch-sizes", opts->micro_batch_sizes, "micro-batch sizes")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--repeats", opts->repeats, "timed steps per point (their median counts)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->callback([opts] { run_profile(*opts); });
}

}  // namespace hspmd::cli
