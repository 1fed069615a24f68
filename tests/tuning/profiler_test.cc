// The profiler: its regression fits, and the measured profile end to end on emulated devices and
// on devices (the path `hspmd profile --device cuda` takes, here over the tests' fake device).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "hspmd/models/llama_model.h"
#include "hspmd/planner/planner.h"
#include "hspmd/runtime/emulation.h"
#include "hspmd/tuning/profiler.h"
#include "planner/planner_testlib.h"
#include "runtime/fake_device_compute_testlib.h"

namespace hspmd::tuning {
namespace {

using ::testing::HasSubstr;
using planner::DeviceKindProfile;
using planner::LayerTimeFit;
using planner::LinearFit;
using planner::Profile;
using planner::TpProfile;

TEST(ProfilerFitTest, RecoversQuadraticLayerTime) {
  const LayerTimeFit truth{3e-9, 2e-6, 4e-4};
  std::vector<TimeSample> samples;
  for (double s : {64.0, 128.0, 256.0}) {
    for (int b : {1, 2}) samples.push_back({s, b, truth.seconds(b, s)});
  }
  const LayerTimeFit fit = fit_layer_time(samples);
  EXPECT_NEAR(fit.a, truth.a, 1e-15);
  EXPECT_NEAR(fit.c1, truth.c1, 1e-12);
  EXPECT_NEAR(fit.c0, truth.c0, 1e-10);
}

TEST(ProfilerFitTest, NegativeQuadraticTermIsDropped) {
  // Concave samples (noise) would fit a < 0: refitted as a line.
  std::vector<TimeSample> samples{{64, 1, 1.0}, {128, 1, 1.9}, {256, 1, 3.0}};
  const LayerTimeFit fit = fit_layer_time(samples);
  EXPECT_EQ(fit.a, 0);
  EXPECT_GT(fit.c1, 0);
  const LinearFit line = fit_linear({{100, 1.0}, {200, 2.0}});
  EXPECT_NEAR(line.per_token, 0.01, 1e-12);
  EXPECT_NEAR(line.constant, 0, 1e-12);
}

// The measured profile end to end, on emulated devices of two speeds: every kind gets its fits
// from the same measurements, AdamW apart from the layers, the memory coefficients and the link.
TEST(ProfilerTest, MeasuresTheHostAsEmulatedKinds) {
  const runtime::EmulatedDevices devices = runtime::EmulatedDevices::from_json_text(
      R"({"devices": [{"rank": 0, "name": "fast", "speed": 1.0}, {"rank": 1, "name": "slow", "speed": 0.5}]})",
      "d.json", 2);
  ProfilerOptions o;
  o.model = "tiny";
  o.tp_degrees = {1};
  o.cp_degrees = {2};
  o.seq_lens = {32, 64};
  o.micro_batch_sizes = {1, 2};
  o.repeats = 2;
  o.devices = &devices;
  std::vector<std::string> lines;
  o.progress = [&](const std::string& line) { lines.push_back(line); };
  const Profile p = profile_host(models::Llama(planner::testing::tiny_config()), o);
  EXPECT_EQ(p.model, "tiny");
  EXPECT_THAT(p.source, HasSubstr("emulated device kinds"));
  ASSERT_EQ(p.devices.size(), 2u);
  for (const char* kind : {"fast", "slow"}) {
    const DeviceKindProfile& k = p.kind(kind);
    EXPECT_GT(k.optimizer_seconds_per_parameter, 0) << kind;
    EXPECT_GT(k.bytes_per_parameter, 0) << kind;
    EXPECT_GT(k.zero_bytes_per_parameter, 0) << kind;
    const TpProfile& t = p.at(kind, 1);
    EXPECT_EQ(t.samples, 4) << kind;
    EXPECT_GT(t.layer.seconds(1, 64), 0) << kind;
    EXPECT_GT(t.activations.keep_per_token, 0) << kind;
    EXPECT_FALSE(p.has(kind, 2)) << kind;
    // One CP rank of CP-2 steps, fitted by the whole sequence.
    ASSERT_NE(p.cp(kind, 2), nullptr) << kind;
    EXPECT_EQ(p.cp(kind, 2)->samples, 4) << kind;
    EXPECT_GT(p.cp(kind, 2)->layer.seconds(2, 64) + p.cp(kind, 2)->ends.seconds(64), 0) << kind;
    EXPECT_EQ(p.cp(kind, 4), nullptr) << kind;
  }
  ASSERT_TRUE(p.link("intra-node").has_value());
  EXPECT_GT(p.link("intra-node")->p2p_bandwidth, 0);
  // The slow kind's factor for compute between sleeps was measured (and said); the fast one runs at
  // the host's speed and needs none.
  int factors = 0;
  int lockstep = 0;
  for (const std::string& line : lines) {
    factors += line.find("compute between sleeps") != std::string::npos;
    lockstep += line.find("beyond the K/V bytes on the link") != std::string::npos;
  }
  EXPECT_EQ(factors, 1);
  EXPECT_EQ(lockstep, 2) << "each kind's CP 2 group measured running as that kind";
}

// Two fake devices (host memory that says it is a GPU, the CPU kernels behind it, Gloo moving its
// memory as NCCL moves a GPU's), whose driver reports 1 GiB of which the pool's blocks and a
// context of 3 MiB are used.
constexpr size_t kFakeTotal = size_t{1} << 30, kFakeContext = size_t{3} << 20;
struct FakeDevices {
  std::vector<std::shared_ptr<hspmd::testing::FakeDeviceMemory>> memory{
      std::make_shared<hspmd::testing::FakeDeviceMemory>(), std::make_shared<hspmd::testing::FakeDeviceMemory>()};
  ProfiledDevices spec;
  FakeDevices() {
    spec.description = "two fake devices";
    spec.kind = "fake";
    spec.count = 2;
    spec.compute = [this](int rank) { return runtime::testing::fake_device_compute(memory.at(rank)); };
    spec.backend = [](int, const graph::ComputeDevice&) { return comm::gloo_backend({}); };
    spec.memory = [this](int rank) {
      return DeviceMemoryInfo{.total_bytes = kFakeTotal,
                              .free_bytes = kFakeTotal - memory.at(rank)->in_use - kFakeContext};
    };
  }
};

// The device path end to end: TP 1 and 2 over both devices, wall-time fits, the post phase and
// the host copies through the device's allocator, the driver's figures for capacity and reserved
// bytes, the link between the devices on their buffers; the profile's text read back has them
// all, and the planner plans with it.
TEST(ProfilerTest, MeasuresDevicesThroughTheirInterface) {
  FakeDevices fake;
  ProfilerOptions o;
  o.model = "tiny";
  o.kind = "fast";  // the planner test cluster's kind
  o.on_devices = &fake.spec;
  o.seq_lens = {32, 64};
  o.micro_batch_sizes = {1, 2};
  o.repeats = 2;
  std::vector<std::string> lines;
  o.progress = [&](const std::string& line) { lines.push_back(line); };
  const models::Llama model(planner::testing::tiny_config());
  const Profile measured = profile_host(model, o);
  const Profile p = Profile::from_json_text(measured.to_json_text(), "measured.json");

  EXPECT_THAT(p.source, HasSubstr("measured on two fake devices (2 device(s)"));
  EXPECT_TRUE(p.layer_includes_tp_comm);
  ASSERT_EQ(p.devices.size(), 1u);
  const DeviceKindProfile& k = p.kind("fast");
  // Wall times on a shared host: a fit may be lost in the noise (a loaded host made the larger runs
  // no slower), not all four.
  double fitted_seconds = 0;
  for (int t : {1, 2}) {
    const TpProfile& tp = p.at("fast", t);
    EXPECT_EQ(tp.samples, 4) << t;
    fitted_seconds += tp.layer.seconds(2, 64) + tp.ends.seconds(128);
    EXPECT_GT(tp.activations.keep_per_token, 0) << t;
  }
  EXPECT_GT(fitted_seconds, 0);
  EXPECT_GT(k.bytes_per_parameter, 0);
  EXPECT_EQ(k.memory_bytes, static_cast<double>(kFakeTotal));
  // Used by the driver's count, less the pool's blocks: exactly the context.
  EXPECT_EQ(k.reserved_bytes, static_cast<double>(kFakeContext));
  EXPECT_GT(k.host_to_device_bandwidth, 0);
  EXPECT_GT(k.device_to_host_bandwidth, 0);
  // The steps ran on the devices: feeds copied in, losses copied out, on both.
  for (const auto& m : fake.memory) {
    EXPECT_GT(m->to_device, 0);
    EXPECT_GT(m->to_host, 0);
  }
  ASSERT_TRUE(p.link("intra-node").has_value());
  EXPECT_GT(p.link("intra-node")->p2p_bandwidth, 0);
  EXPECT_GT(p.link("intra-node")->allreduce_bandwidth, 0);
  int said = 0;
  for (const std::string& line : lines) {
    said += line.find("host -> device") != std::string::npos || line.find("devices 0 and 1") != std::string::npos ||
            line.find("steps of 1 and 2 micro-batches") != std::string::npos;
  }
  EXPECT_EQ(said, 3);

  const resolve::Topology cluster = planner::testing::two_kind_cluster(2, 0, 8e9);
  planner::PlannerOptions po;
  po.global_batch = 4;
  po.seq_len = 64;
  const planner::Plan plan = planner::Planner(model, cluster, p, po).plan();
  EXPECT_GT(plan.prediction.step_seconds, 0);
}

// One device: no link to measure (the planner takes the cluster spec's); TP degrees beyond the
// devices and emulated kinds beside them are refused, naming why.
TEST(ProfilerTest, OneDeviceHasNoLinkAndNoSecondRank) {
  FakeDevices fake;
  fake.spec.count = 1;
  ProfilerOptions o;
  o.model = "tiny";
  o.kind = "fake";
  o.on_devices = &fake.spec;
  o.seq_lens = {32, 64};
  o.micro_batch_sizes = {1, 2};
  o.repeats = 1;
  const models::Llama model(planner::testing::tiny_config());
  const Profile p = profile_host(model, o);
  EXPECT_FALSE(p.link("intra-node").has_value());
  EXPECT_TRUE(p.has("fake", 1));
  EXPECT_FALSE(p.has("fake", 2));
  EXPECT_EQ(fake.memory[1]->to_device, 0);

  o.tp_degrees = {2};
  try {
    profile_host(model, o);
    ADD_FAILURE() << "TP 2 on one device was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("TP 2 needs 2 devices, and 1 from two fake devices are visible"));
  }
  o.tp_degrees = {};
  o.cp_degrees = {2};
  try {
    profile_host(model, o);
    ADD_FAILURE() << "CP 2 on one device was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("CP 2 needs 2 devices, and 1 from two fake devices are visible"));
  }
  o.cp_degrees = {};
  const runtime::EmulatedDevices emulated = runtime::EmulatedDevices::from_json_text(
      R"({"devices": [{"rank": 0, "name": "slow", "speed": 0.5}]})", "d.json", 1);
  o.devices = &emulated;
  try {
    profile_host(model, o);
    ADD_FAILURE() << "emulated kinds beside measured devices were accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("emulated devices (--devices) are kinds of the host's cores"));
  }
}

}  // namespace
}  // namespace hspmd::tuning
