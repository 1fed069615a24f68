// Profile files (round trip, errors naming the key) and profiles derived from datasheets. The
// profiler, which measures the runtime, is tested in tests/tuning/profiler_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "error_of.h"
#include "hspmd/core/error.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/planner/derived_profile.h"
#include "hspmd/planner/profile.h"
#include "planner/planner_testlib.h"

namespace hspmd::planner {
namespace {

using ::testing::HasSubstr;
using hspmd::testing::error_of;

TEST(ProfileTest, JsonRoundTrip) {
  Profile p = testing::two_kind_profile();
  p.model = "configs/llama-tiny.json";
  p.links["intra-node"] = {2e9, 3e9, 5e-5};
  const Profile q = Profile::from_json_text(p.to_json_text(), "p.json");
  EXPECT_EQ(q.source, p.source);
  EXPECT_EQ(q.model, p.model);
  ASSERT_EQ(q.devices.size(), 2u);
  EXPECT_DOUBLE_EQ(q.at("slow", 2).layer.c1, p.at("slow", 2).layer.c1);
  EXPECT_DOUBLE_EQ(q.at("fast", 1).activations.transient_per_token, p.at("fast", 1).activations.transient_per_token);
  EXPECT_DOUBLE_EQ(q.kind("slow").optimizer_seconds_per_parameter, p.kind("slow").optimizer_seconds_per_parameter);
  EXPECT_DOUBLE_EQ(q.link("intra-node")->allreduce_bandwidth, 3e9);
  EXPECT_FALSE(q.link("inter-node").has_value());
}

// A device's measured figures (`hspmd profile --device cuda`) come back; a profile without them,
// as every host or derived one, neither writes nor reads them.
TEST(ProfileTest, DeviceFiguresRoundTripAndAreOptional) {
  Profile p = testing::two_kind_profile();
  p.devices["fast"].memory_bytes = 141e9;
  p.devices["fast"].host_to_device_bandwidth = 2.5e10;
  p.devices["fast"].device_to_host_bandwidth = 2.4e10;
  const std::string text = p.to_json_text();
  const Profile q = Profile::from_json_text(text, "p.json");
  EXPECT_DOUBLE_EQ(q.kind("fast").memory_bytes, 141e9);
  EXPECT_DOUBLE_EQ(q.kind("fast").host_to_device_bandwidth, 2.5e10);
  EXPECT_DOUBLE_EQ(q.kind("fast").device_to_host_bandwidth, 2.4e10);
  EXPECT_EQ(q.kind("slow").memory_bytes, 0);
  EXPECT_EQ(text.find("memory_bytes"), text.rfind("memory_bytes")) << "written for the measured kind only";
  EXPECT_EQ(testing::two_kind_profile().to_json_text().find("memory_bytes"), std::string::npos);
  p.devices["fast"].memory_bytes = -1;
  EXPECT_THAT(error_of([&] { Profile::from_json_text(p.to_json_text(), "p.json"); }),
              HasSubstr("p.json.devices.fast.memory_bytes: expected a non-negative number"));
}

// A kind's measured CP ranks (`hspmd profile --cp`) come back by degree; a profile without them
// writes no "cp" key; a degree below 2 is refused naming the key.
TEST(ProfileTest, CpFiguresRoundTripAndAreOptional) {
  Profile p = testing::two_kind_profile();
  p.devices["fast"].cp[2] = {.layer = {3e-8, 9e-6, 7e-5},
                             .ends = {2e-6, 1e-4},
                             .samples = 6,
                             .fit_error = 0.05,
                             .lockstep_seconds_per_layer = 4e-4};
  const std::string text = p.to_json_text();
  const Profile q = Profile::from_json_text(text, "p.json");
  ASSERT_NE(q.cp("fast", 2), nullptr);
  EXPECT_DOUBLE_EQ(q.cp("fast", 2)->layer.a, 3e-8);
  EXPECT_DOUBLE_EQ(q.cp("fast", 2)->layer.c0, 7e-5);
  EXPECT_DOUBLE_EQ(q.cp("fast", 2)->ends.per_token, 2e-6);
  EXPECT_EQ(q.cp("fast", 2)->samples, 6);
  EXPECT_DOUBLE_EQ(q.cp("fast", 2)->lockstep_seconds_per_layer, 4e-4);
  EXPECT_EQ(q.cp("fast", 4), nullptr);
  EXPECT_EQ(q.cp("slow", 2), nullptr);
  EXPECT_EQ(testing::two_kind_profile().to_json_text().find("\"cp\""), std::string::npos);
  std::string bad = text;
  bad.replace(bad.find("\"cp\": {\n        \"2\""), 19, "\"cp\": {\n        \"1\"");
  EXPECT_THAT(error_of([&] { Profile::from_json_text(bad, "p.json"); }),
              HasSubstr("p.json.devices.fast.cp.1: a CP degree must be at least 2"));
}

TEST(ProfileTest, ErrorsNameTheKey) {
  const std::string good = testing::two_kind_profile().to_json_text();
  std::string bad = good;
  bad.replace(bad.find("\"bytes_per_parameter\""), 21, "\"bytes_per_paramter\"");
  EXPECT_THAT(error_of([&] { Profile::from_json_text(bad, "p.json"); }),
              HasSubstr("missing required key \"bytes_per_parameter\""));
  EXPECT_THAT(error_of([&] { Profile::from_json_text(R"({"format": "x", "source": "s", "devices": {}})", "p.json"); }),
              HasSubstr("p.json.format: expected \"hspmd-profile/1\""));
  const Profile p = testing::two_kind_profile();
  EXPECT_THAT(error_of([&] { p.at("fast", 4); }), HasSubstr("was not profiled at TP 4; profiled degrees: 1, 2"));
  EXPECT_THAT(error_of([&] { p.kind("H100"); }), HasSubstr("no device kind \"H100\"; it has: fast, slow"));
}

TEST(DerivedProfileTest, ComputeFromFlopsOverPeak) {
  const models::LlamaConfig c = testing::tiny_config();
  const resolve::Topology topo = testing::two_kind_cluster(2, 2, 1e9);  // peak 1e11
  DerivationOptions o;
  o.efficiency = 0.5;
  const Profile p = derive_profile(models::Llama(c), topo, o);
  EXPECT_THAT(p.source, HasSubstr("DERIVED"));
  // One layer, fwd + bwd, one 64-token sequence at TP 1: 3 * (2 * 64 * matmul params + 2 * 64^2 * hidden) FLOPs.
  const double matmul = 184576 - 2 * 128;
  const double flops = 3 * (2 * 64 * matmul + 2 * 64.0 * 64 * 128);
  EXPECT_NEAR(p.at("fast", 1).layer.seconds(1, 64), flops / 5e10, 1e-12);
  EXPECT_NEAR(p.at("slow", 2).layer.seconds(1, 64), flops / 5e10 / 2, 1e-12);
  EXPECT_FALSE(p.has("fast", 4));  // a node holds two of each
}

// The shipped paper profiles are what `hspmd profile --from-cluster` derives today.
TEST(DerivedProfileTest, ShippedPaperProfilesAreCurrent) {
  const std::string root = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
  const resolve::Topology topo = resolve::Topology::from_file(root + "/examples/clusters/paper-16h800-32h20.json");
  for (const char* model : {"32b", "70b"}) {
    const models::LlamaConfig c = models::LlamaConfig::from_file(root + "/configs/llama-" + model + ".json");
    const Profile shipped =
        Profile::from_file(root + "/examples/profiles/paper-h800-h20-llama-" + std::string(model) + ".json");
    const Profile derived = derive_profile(models::Llama(c), topo, {});
    EXPECT_THAT(shipped.source, HasSubstr("DERIVED from datasheet figures, not measured"));
    ASSERT_EQ(shipped.devices.size(), derived.devices.size());
    for (const auto& [kind, k] : derived.devices) {
      ASSERT_EQ(shipped.kind(kind).tp.size(), k.tp.size()) << model << " " << kind;
      for (const auto& [t, tp] : k.tp) {
        EXPECT_DOUBLE_EQ(shipped.at(kind, t).layer.c1, tp.layer.c1) << model << " " << kind << " TP " << t;
        EXPECT_DOUBLE_EQ(shipped.at(kind, t).activations.keep_per_token, tp.activations.keep_per_token);
      }
      EXPECT_DOUBLE_EQ(shipped.kind(kind).zero_bytes_per_parameter, k.zero_bytes_per_parameter);
    }
  }
}

}  // namespace
}  // namespace hspmd::planner
