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
//
// `--device cuda[:N] [--precision bf16]` measures the GPUs from N on instead of the host's cores
// (tuning/profiled_devices.h); the kind is the GPU's name unless --kind names it:
//
//   hspmd profile --model configs/llama-tiny.json --device cuda --kind H200 --out runs/profile-h200.json
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "hspmd/core/atomic_file.h"
#include "hspmd/core/device.h"
#include "hspmd/core/dtype.h"
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
  bool kind_given = false;
  Device device;
  DType precision = DType::kFloat32;
  double efficiency = 0.45;
  std::vector<int> tp_degrees;
  std::vector<int> cp_degrees;
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
    HSPMD_CHECK(o.devices.empty() && o.device.type == DeviceType::kCPU)
        << "profile: --from-cluster derives figures; --devices and --device measure: give one";
    const resolve::Topology cluster = resolve::Topology::from_file(o.from_cluster);
    const planner::Profile p = planner::derive_profile(
        *model, cluster, {.model = o.model, .efficiency = o.efficiency, .cluster = o.from_cluster});
    write_profile(p, o.out);
    std::cout << "derived (not measured) a profile of " << o.model << " from " << o.from_cluster << "; wrote " << o.out
              << "\n";
    return;
  }
  HSPMD_CHECK(o.devices.empty() || o.device.type == DeviceType::kCPU)
      << "profile: --devices emulates device kinds on the host's cores; --device " << o.device.to_string()
      << " measures that device: give one";
  std::optional<tuning::ProfiledDevices> gpus;
  if (o.device.type == DeviceType::kCUDA) gpus = tuning::cuda_profiled_devices(o.device.index);
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
  po.cp_degrees = o.cp_degrees;
  po.seq_lens = o.seq_lens;
  po.micro_batch_sizes = o.micro_batch_sizes;
  po.repeats = o.repeats;
  po.kind = gpus && !o.kind_given ? gpus->kind : o.kind;
  po.devices = devices ? &*devices : nullptr;
  po.on_devices = gpus ? &*gpus : nullptr;
  po.precision = o.precision;
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
      app.add_subcommand("profile",
                         "Measure compute, memory and links on this host or its GPUs and fit the planner's cost model");
  cmd->add_option("--model", opts->model, "model config.json (Hugging Face style)")->required();
  cmd->add_option("--out", opts->out, "where to write the profile JSON")->required();
  cmd->add_option("--devices", opts->devices, "emulated devices JSON: one device kind per device name (CPU emulation)");
  cmd->add_option_function<std::string>(
         "--kind",
         [opts](const std::string& name) {
           opts->kind = name;
           opts->kind_given = true;
         },
         "device kind name without --devices (the cluster spec's \"type\"); with --device cuda the GPU's name "
         "unless given")
      ->default_str("cpu");
  cmd->add_option_function<std::string>(
         "--device", [opts](const std::string& name) { opts->device = Device::parse(name); },
         "what to measure: cpu (default: the host's cores), or cuda / cuda:N (the GPUs from N on: one rank per GPU, "
         "NCCL between them; needs a build with the CUDA backend; docs/gpu.md)")
      ->default_str("cpu");
  cmd->add_option_function<std::string>(
         "--precision", [opts](const std::string& name) { opts->precision = parse_dtype(name); },
         "of the timed training steps, as `hspmd train --precision`: fp32 (default) or bf16")
      ->check(CLI::IsMember({"fp32", "bf16", "float32", "bfloat16"}))
      ->default_str("fp32");
  cmd->add_option("--from-cluster", opts->from_cluster,
                  "derive the figures from this cluster spec's peak_flops and memory instead of measuring "
                  "(for clusters this host cannot reach; labelled as derived)");
  cmd->add_option("--efficiency", opts->efficiency, "--from-cluster: achieved fraction of peak FLOP/s")
      ->capture_default_str();
  cmd->add_option("--tp", opts->tp_degrees, "TP degrees (default: powers of two up to the host's cores, or the GPUs)")
      ->delimiter(',');
  cmd->add_option("--cp", opts->cp_degrees,
                  "CP degrees to measure at TP 1 (default: powers of two from 2 up to the host's cores, or the "
                  "GPUs; 1: none)")
      ->delimiter(',');
  cmd->add_option("--seq-lens", opts->seq_lens, "sequence lengths (default 64,128,256; on GPUs 512,1024,2048)")
      ->delimiter(',');
  cmd->add_option("--micro-batch-sizes", opts->micro_batch_sizes, "micro-batch sizes")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--repeats", opts->repeats, "timed steps per point (their median counts)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->callback([opts] { run_profile(*opts); });
}

}  // namespace hspmd::cli
