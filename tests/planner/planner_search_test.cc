// The planner's search beyond its optimality (tests/planner/planner_test.cc): a time limit returns
// the best plan found, marked, with progress reports; the cluster generator; a generated 64-GPU
// cluster planned completely; long sequences getting CP stages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "hspmd/core/error.h"
#include "hspmd/models/llama.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/planner/cluster_generator.h"
#include "hspmd/planner/planner.h"
#include "planner/planner_testlib.h"

namespace hspmd::planner {
namespace {

using ::testing::HasSubstr;
using testing::tiny_config;
using testing::two_kind_cluster;
using testing::two_kind_profile;

const std::string kRoot = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();

// A search stopped by its time limit returns the best plan found so far, marked incomplete, and
// reports what it is doing on the way; the full search's plan is at least as fast.
TEST(PlannerProgressTest, TimeLimitReturnsTheBestPlanFoundMarkedAsSuch) {
  const models::LlamaConfig config = tiny_config();
  const resolve::Topology topo = two_kind_cluster(4, 2, 1e9);
  const Profile profile = two_kind_profile(2.0);
  PlannerOptions o;
  o.global_batch = 8;
  o.seq_len = 64;
  const Plan full = Planner(models::Llama(config), topo, profile, o).plan();
  EXPECT_TRUE(full.complete);
  EXPECT_GT(full.candidates_solved, 1);
  std::vector<PlanningProgress> reports;
  o.time_limit_seconds = 1e-9;  // stop at the first candidate after a plan fits
  o.progress_interval_seconds = 1e-9;
  o.progress = [&](const PlanningProgress& p) { reports.push_back(p); };
  const Plan limited = Planner(models::Llama(config), topo, profile, o).plan();
  EXPECT_FALSE(limited.complete);
  EXPECT_TRUE(limited.prediction.fits);
  EXPECT_GE(limited.prediction.step_seconds, full.prediction.step_seconds);
  EXPECT_LT(limited.lowest_bound_left, limited.prediction.step_seconds);
  EXPECT_LT(limited.candidates_solved, full.candidates_solved);
  EXPECT_THAT(describe_plan(limited), HasSubstr("BEST FOUND WITHIN THE TIME LIMIT"));
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.front().best_step_seconds, std::numeric_limits<double>::infinity());
  EXPECT_THAT(reports.front().to_string(), HasSubstr("none fits yet"));
  EXPECT_THAT(reports.front().to_string(), HasSubstr("s left of the 1e-09 s limit"));
  EXPECT_GT(reports.front().cuts, 0);
  EXPECT_GT(reports.front().candidates, 0);
}

// The cluster generator: kinds on nodes of their own (the last one partial), the reference's
// figures per kind and its two link tiers.
TEST(ClusterGeneratorTest, KindsFillTheirOwnNodesWithTheReferenceFigures) {
  const resolve::Topology paper = resolve::Topology::from_file(kRoot + "/examples/clusters/paper-16h800-32h20.json");
  ClusterRecipe r = recipe_like(paper, parse_kind_counts("H20:20,H800:12"));
  r.devices_per_node = 8;
  const resolve::Topology t = resolve::Topology::from_json_text(cluster_json(r), "generated.json");
  ASSERT_EQ(t.num_devices(), 32);
  // H20: nodes 0, 1, 2 (4 devices); H800: nodes 3 (8) and 4 (4).
  EXPECT_EQ(t.device(19).type, "H20");
  EXPECT_EQ(t.device(19).node, 2);
  EXPECT_EQ(t.device(20).type, "H800");
  EXPECT_EQ(t.device(20).node, 3);
  EXPECT_EQ(t.device(31).node, 4);
  EXPECT_EQ(t.device(20).memory, paper.device(0).memory);
  EXPECT_EQ(t.device(0).peak_flops, paper.device(16).peak_flops);
  EXPECT_EQ(t.bandwidth(20, 21), paper.bandwidth(0, 1));    // H800 NVLink
  EXPECT_EQ(t.bandwidth(0, 1), paper.bandwidth(16, 17));    // H20 NVLink
  EXPECT_EQ(t.bandwidth(0, 20), paper.bandwidth(0, 16));    // between nodes
  EXPECT_THROW(parse_kind_counts("H800"), Error);
  EXPECT_THROW(parse_kind_counts("H800:0"), Error);
  EXPECT_THROW(recipe_like(paper, parse_kind_counts("A100:8")), Error);
}

// Planning a generated 64-GPU two-kind cluster (3/8 H800, 5/8 H20) with the shipped profile: a
// complete search whose plan fits, every rank used or left idle with its reason.
TEST(PlannerScaleTest, GeneratedClusterIsPlannedCompletely) {
  const resolve::Topology paper = resolve::Topology::from_file(kRoot + "/examples/clusters/paper-16h800-32h20.json");
  const resolve::Topology topo =
      resolve::Topology::from_json_text(cluster_json(recipe_like(paper, {{"H800", 24}, {"H20", 40}})), "gen.json");
  const models::LlamaConfig config = models::LlamaConfig::from_file(kRoot + "/configs/llama-32b.json");
  const Profile profile = Profile::from_file(kRoot + "/examples/profiles/paper-h800-h20-llama-32b.json");
  PlannerOptions o;
  o.global_batch = 64;
  o.seq_len = 4096;
  const Plan plan = Planner(models::Llama(config), topo, profile, o).plan();
  EXPECT_TRUE(plan.complete);
  EXPECT_TRUE(plan.prediction.fits);
  EXPECT_EQ(plan.strategy.ranks().size() + plan.idle.size(), 64u) << describe_plan(plan);
  EXPECT_NO_THROW(plan.strategy.validate(static_cast<int>(config.num_hidden_layers)));
}

}  // namespace
}  // namespace hspmd::planner

namespace hspmd::planner {
namespace {

// One sequence of 8,192 tokens a step: data parallelism cannot split it, so on the 4 fast devices
// TP 2 x CP 2 (each rank a quarter of the attention) beats every plan without CP, and the search
// finds it once CP degree 2 is offered; the plan is one the runtime accepts.
TEST(PlannerContextParallelTest, LongSequencesGetCpStages) {
  const models::LlamaConfig config = tiny_config();
  const resolve::Topology topo = two_kind_cluster(4, 2, 1e12);
  const Profile profile = two_kind_profile(3.0);
  PlannerOptions o;
  o.global_batch = 1;
  o.seq_len = 8192;
  o.cp_degrees = {1};
  const Plan plain = Planner(models::Llama(config), topo, profile, o).plan();
  o.cp_degrees = {1, 2};
  const Plan cp = Planner(models::Llama(config), topo, profile, o).plan();
  // Unprompted, 8,192 tokens are long: the search tries CP degrees 1, 2, 4, 8 (8 exceeds a node of
  // 4 here) and finds a plan at least as fast.
  o.cp_degrees = {};
  EXPECT_EQ(searched_cp_degrees(o), (std::vector<int>{1, 2, 4, 8}));
  const Plan unprompted = Planner(models::Llama(config), topo, profile, o).plan();
  EXPECT_LE(unprompted.prediction.step_seconds, cp.prediction.step_seconds * (1 + 1e-12)) << describe_plan(unprompted);
  // Short sequences are not searched with CP unless asked.
  o.seq_len = 4096;
  EXPECT_EQ(searched_cp_degrees(o), (std::vector<int>{1}));
  ASSERT_TRUE(cp.prediction.fits);
  EXPECT_LT(cp.prediction.step_seconds, plain.prediction.step_seconds) << describe_plan(cp);
  bool has_cp = false;
  for (const auto& pipe : cp.strategy.pipelines) {
    for (const auto& s : pipe.stages) has_cp = has_cp || s.cp == 2;
  }
  EXPECT_TRUE(has_cp) << describe_plan(cp);
  // The planner's objective is the cost model's prediction of its strategy.
  EXPECT_DOUBLE_EQ(cp.prediction.step_seconds,
                   CostModel(models::Llama(config), topo, profile, {.seq_len = 8192})
                       .predict(cp.strategy)
                       .step_seconds);
  EXPECT_NO_THROW(models::compile_llama_plan(config, cp.strategy));
  for (const auto& pipe : plain.strategy.pipelines) {
    for (const auto& s : pipe.stages) EXPECT_EQ(s.cp, 1);
  }
}

}  // namespace
}  // namespace hspmd::planner
