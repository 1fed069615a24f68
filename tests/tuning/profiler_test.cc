// The profiler: its regression fits, and the measured profile end to end on emulated devices.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hspmd/models/llama_model.h"
#include "hspmd/runtime/emulation.h"
#include "hspmd/tuning/profiler.h"
#include "planner/planner_testlib.h"

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
  }
  ASSERT_TRUE(p.link("intra-node").has_value());
  EXPECT_GT(p.link("intra-node")->p2p_bandwidth, 0);
  // The slow kind's factor for compute between sleeps was measured (and said); the fast one runs at
  // the host's speed and needs none.
  int factors = 0;
  for (const std::string& line : lines) factors += line.find("compute between sleeps") != std::string::npos;
  EXPECT_EQ(factors, 1);
}

}  // namespace
}  // namespace hspmd::tuning
