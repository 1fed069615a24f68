// The mixed-length planner: on a fast and a slow node, a long-tailed length distribution gets
// pipelines per length interval covering the lengths in order, strategies per maximum length that
// the dispatch accepts, and lengths no method holds are refused with the length.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "hspmd/planner/cost_model.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/planner/dispatcher.h"
#include "hspmd/planner/mixed_length_planner.h"
#include "planner/planner_testlib.h"

namespace hspmd::planner {
namespace {

using ::testing::HasSubstr;

std::vector<std::pair<int64_t, uint64_t>> long_tail() {
  // Many short segments, fewer long ones, up to 256 tokens.
  return {{4, 400}, {8, 300}, {16, 200}, {32, 120}, {64, 60}, {128, 20}, {256, 6}};
}

TEST(MixedLengthPlannerTest, IntervalsMethodsAndStrategiesPerMaximumLength) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = testing::two_kind_cluster(4, 4, 1e9);
  const Profile profile = testing::two_kind_profile(3.0);
  const MixedLengthPlan plan =
      plan_mixed_length(models::Llama(config), topo, profile, long_tail(),
                        {.seq_len = 256, .global_batch_tokens = 4096});
  std::cout << plan.to_string();  // for the log
  ASSERT_FALSE(plan.intervals.empty());
  EXPECT_NO_THROW(plan.heterogeneous.validate(config.num_hidden_layers));
  EXPECT_LE(plan.heterogeneous.ranks().size(), 8u);
  // Intervals cover the lengths in order.
  EXPECT_EQ(plan.intervals.front().low, 4);
  EXPECT_EQ(plan.intervals.back().high, 257);
  for (size_t i = 1; i < plan.intervals.size(); ++i) EXPECT_EQ(plan.intervals[i].low, plan.intervals[i - 1].high);
  EXPECT_GT(plan.predicted_seconds, 0);
  for (const MixedLengthInterval& i : plan.intervals) EXPECT_LE(i.seconds, plan.predicted_seconds * (1 + 1e-12));
  // Strategies per maximum length: increasing, the last for the whole context, each priced by the
  // length-strategy set (which also checks every pipeline fits the model).
  ASSERT_FALSE(plan.per_max_length.empty());
  EXPECT_EQ(plan.per_max_length.back().max_len, 256);
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 256});
  const LengthStrategies set(models::Llama(config), cm, plan.per_max_length, {.seq_len = 256});
  const Choice c = set.choose(std::vector<int64_t>{200, 30, 8, 8, 4}, 0);
  EXPECT_GE(set.at(c.strategy).max_len, 200);
  EXPECT_THAT(plan.to_string(), HasSubstr("lengths [4, "));

}

TEST(MixedLengthPlannerTest, RefusesLengthsNoMethodHolds) {
  const models::LlamaConfig config = testing::tiny_config();
  // 17 MB per device: the weights fit, long sequences' activations do not.
  const resolve::Topology topo = testing::two_kind_cluster(2, 2, 17.0e6);
  const Profile profile = testing::two_kind_profile(3.0);
  try {
    plan_mixed_length(models::Llama(config), topo, profile, {{8, 10}, {100000, 1}},
                      {.seq_len = 100000, .global_batch_tokens = 200000});
    FAIL() << "a 100000-token segment was planned for";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("holds the segments of up to 100000 tokens"));
  }
}

}  // namespace
}  // namespace hspmd::planner
