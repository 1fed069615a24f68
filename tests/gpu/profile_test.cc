// `hspmd profile --device cuda:0`'s measurement (tuning/profiler.h over cuda_profiled_devices) on
// llama-tiny: the written profile is plausible (every figure measured, the driver's capacity, a
// reserved share of it, host <-> device copy rates, a link tier only with a second GPU) and the
// planner reads it unchanged and plans a one-GPU cluster with it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "gpu/decoder_configs_testlib.h"
#include "hspmd/core/cuda/cuda_error.h"
#include "hspmd/planner/planner.h"
#include "hspmd/tuning/profiler.h"

namespace hspmd::tuning {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST(GpuProfileTest, ProfilesCuda0ForThePlanner) {
  const ProfiledDevices gpus = cuda_profiled_devices(0);
  const testing::DecoderConfig& llama = testing::decoder_configs().front();
  ASSERT_EQ(llama.name, "llama-tiny");
  const std::shared_ptr<const models::Model> model = testing::decoder_model(llama);
  ProfilerOptions o;
  o.model = llama.name;
  o.kind = "gpu";
  o.on_devices = &gpus;
  o.tp_degrees = {1};
  o.seq_lens = {64, 128, 256};
  o.micro_batch_sizes = {1, 2};
  o.repeats = 3;
  o.precision = DType::kBFloat16;
  o.progress = [](const std::string& line) { std::cerr << line; };
  const planner::Profile measured = profile_host(*model, o);

  const fs::path file = fs::temp_directory_path() / ("hspmd-gpu-profile-" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << measured.to_json_text();
  const planner::Profile p = planner::Profile::from_file(file.string());
  fs::remove(file);

  EXPECT_THAT(p.source, HasSubstr("measured on " + gpus.description));
  EXPECT_TRUE(p.layer_includes_tp_comm);
  const planner::DeviceKindProfile& k = p.kind("gpu");
  const planner::TpProfile& tp = p.at("gpu", 1);
  EXPECT_EQ(tp.samples, 6);
  for (double c : {tp.layer.a, tp.layer.c1, tp.layer.c0, tp.ends.per_token, tp.ends.constant}) {
    EXPECT_TRUE(std::isfinite(c) && c >= 0) << c;
  }
  EXPECT_GT(tp.layer.seconds(2, 256), 0);
  EXPECT_GT(tp.activations.keep_per_token, 0);
  EXPECT_GT(k.bytes_per_parameter, 0);
  EXPECT_GE(k.optimizer_seconds_per_parameter, 0);
  size_t free_bytes = 0, total_bytes = 0;
  {
    const cuda::DeviceGuard current(0);
    HSPMD_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  }
  EXPECT_EQ(k.memory_bytes, static_cast<double>(total_bytes));
  // The CUDA context and cuBLASLt's workspace at least; far from the whole card.
  EXPECT_GT(k.reserved_bytes, 0);
  EXPECT_LT(k.reserved_bytes, k.memory_bytes / 2);
  EXPECT_GT(k.host_to_device_bandwidth, 0);
  EXPECT_GT(k.device_to_host_bandwidth, 0);
  EXPECT_EQ(p.link("intra-node").has_value(), gpus.count >= 2);

  const std::string spec = R"({"name": "one-gpu", "devices": [{"id": 0, "node": 0, "type": "gpu", "memory": )" +
                           std::to_string(k.memory_bytes) +
                           R"(, "peak_flops": 1e15}], "intra_node_bandwidth": 1e11, "inter_node_bandwidth": 1e10})";
  const resolve::Topology cluster = resolve::Topology::from_json_text(spec, "one-gpu.json");
  planner::PlannerOptions po;
  po.global_batch = 4;
  po.seq_len = 256;
  const planner::Plan plan = planner::Planner(*model, cluster, p, po).plan();
  EXPECT_GT(plan.prediction.step_seconds, 0);
  EXPECT_TRUE(plan.prediction.fits);
}

}  // namespace
}  // namespace hspmd::tuning
