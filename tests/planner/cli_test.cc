// `hspmd plan`, `hspmd explain --profile` and `hspmd profile --from-cluster` through the built
// binary: the plan is written as a strategy file the runtime accepts, the figures are printed (with
// the gradient buckets given), and a model that cannot fit is refused with exit code 1.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "hspmd/models/llama_plan.h"
#include "hspmd/planner/profile.h"
#include "planner/planner_testlib.h"
#include "run_hspmd.h"

namespace hspmd::planner {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

const std::string kRoot = fs::path(__FILE__).parent_path().parent_path().parent_path().string();

class PlanCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::ifstream(hspmd::testing::hspmd_binary()).good()) << "hspmd not built (set HSPMD_BINARY_DIR)";
    dir_ = fs::temp_directory_path() / ("hspmd-plan-cli-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "profile.json") << testing::two_kind_profile().to_json_text();
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write_cluster(double memory) {
    std::ofstream out(path("cluster.json"));
    out << R"({"name": "two-kinds", "devices": [)";
    for (int r = 0; r < 4; ++r) {
      out << (r ? "," : "") << R"({"id": )" << r << R"(, "node": )" << r / 2 << R"(, "type": ")"
          << (r < 2 ? "fast" : "slow") << R"(", "memory": )" << memory << "}";
    }
    out << R"(], "intra_node_bandwidth": 1e10, "inter_node_bandwidth": 1e9})";
  }
  fs::path dir_;
};

TEST_F(PlanCliTest, PlanThenExplain) {
  write_cluster(1e9);
  const std::string model = kRoot + "/configs/llama-tiny.json";
  const auto plan = hspmd::testing::run_hspmd("plan --model " + model + " --cluster " + path("cluster.json") +
                                              " --profile " + path("profile.json") +
                                              " --global-batch 8 --seq-len 64 --out " + path("s.json"));
  ASSERT_EQ(plan.code, 0) << plan.output;
  EXPECT_THAT(plan.output, HasSubstr("predicted step time: "));
  EXPECT_THAT(plan.output, HasSubstr("predicted memory per rank:\n  rank 0 (fast"));
  EXPECT_THAT(plan.output, HasSubstr("planning time: "));
  const sharding::Strategy st = sharding::Strategy::from_file(path("s.json"));
  models::compile_llama_plan(models::LlamaConfig::from_file(model), st);  // what `hspmd train` compiles

  const auto explain = hspmd::testing::run_hspmd("explain --strategy " + path("s.json") + " --model " + model +
                                                 " --cluster " + path("cluster.json") + " --profile " +
                                                 path("profile.json") + " --seq-len 64");
  ASSERT_EQ(explain.code, 0) << explain.output;
  EXPECT_THAT(explain.output, HasSubstr("pipeline 0"));
  // The same prediction as the planner printed.
  const size_t at = plan.output.find("predicted step time: ");
  const std::string line = plan.output.substr(at, plan.output.find('\n', at) - at);
  EXPECT_THAT(explain.output, HasSubstr(line));

  const auto missing = hspmd::testing::run_hspmd("explain --strategy " + path("s.json") + " --model " + model +
                                                 " --profile " + path("profile.json"));
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.output, HasSubstr("--profile needs --cluster"));
}

TEST_F(PlanCliTest, UnfitModelIsRefused) {
  write_cluster(2e6);
  const auto r = hspmd::testing::run_hspmd("plan --model " + kRoot + "/configs/llama-tiny.json --cluster " +
                                           path("cluster.json") + " --profile " + path("profile.json") +
                                           " --global-batch 8 --seq-len 64 --out " + path("s.json"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("no plan fits in memory"));
  EXPECT_FALSE(fs::exists(path("s.json")));
}

TEST_F(PlanCliTest, DerivedProfileIsLabelled) {
  const auto r = hspmd::testing::run_hspmd("profile --model " + kRoot + "/configs/llama-32b.json --from-cluster " +
                                           kRoot + "/examples/clusters/paper-16h800-32h20.json --out " +
                                           path("p.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  const Profile p = Profile::from_file(path("p.json"));
  EXPECT_THAT(p.source, HasSubstr("DERIVED from datasheet figures, not measured"));
  EXPECT_TRUE(p.has("H800", 8));
  EXPECT_TRUE(p.has("H20", 4));
}

TEST_F(PlanCliTest, PlanFromADatasetsLengths) {
  write_cluster(1e9);
  const std::string model = kRoot + "/configs/llama-tiny.json";
  auto r = hspmd::testing::run_hspmd("data prepare --input " + kRoot + "/data/corpus/kjv-genesis-2kings.txt --output " +
                                     path("kjv") + " --append-eos");
  ASSERT_EQ(r.code, 0) << r.output;
  r = hspmd::testing::run_hspmd("data long-tailed --source " + path("kjv") + " --output " + path("mixed") +
                                " --documents 2000 --median 16 --max-length 256 --sigma 1");
  ASSERT_EQ(r.code, 0) << r.output;
  r = hspmd::testing::run_hspmd("plan --model " + model + " --cluster " + path("cluster.json") + " --profile " +
                                path("profile.json") + " --data " + path("mixed") +
                                " --seq-len 256 --global-batch-tokens 4096 --out " + path("mixed.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("segment lengths at --seq-len 256"));
  EXPECT_THAT(r.output, HasSubstr("heterogeneous strategy mixed: predicted"));
  EXPECT_THAT(r.output, HasSubstr("--strategy-for-max-len 256:" + path("mixed-max256.json")));
  // By default an interval combines methods (here fast TP 1 and slow TP 2 pipelines on one interval).
  EXPECT_THAT(r.output, HasSubstr(") + ")) << r.output;
  // Every written strategy is one the runtime compiles for the model.
  const models::LlamaConfig config = models::LlamaConfig::from_file(model);
  EXPECT_NO_THROW(models::compile_llama_plan(config, sharding::Strategy::from_file(path("mixed.json"))));
  EXPECT_NO_THROW(models::compile_llama_plan(config, sharding::Strategy::from_file(path("mixed-max256.json"))));
  // The search space from the command line: one method per interval, no CP, micro-batches of one row.
  r = hspmd::testing::run_hspmd("plan --model " + model + " --cluster " + path("cluster.json") + " --profile " +
                                path("profile.json") + " --data " + path("mixed") +
                                " --seq-len 256 --global-batch-tokens 4096 --methods-per-interval 1 --cp-degrees 1"
                                " --micro-batch-sizes 1 --out " + path("one.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, Not(HasSubstr(") + ")));
  EXPECT_THAT(r.output, Not(HasSubstr("x CP 2")));
  EXPECT_THAT(r.output, HasSubstr("micro-batches of 256 tokens"));
  for (const auto& pipe : sharding::Strategy::from_file(path("one.json")).pipelines) {
    EXPECT_EQ(pipe.micro_batch_size, 1);
    for (const auto& stage : pipe.stages) EXPECT_EQ(stage.cp, 1);
  }
}

// `explain --profile` prices a CP stage by its TP and CP degrees: the shipped TP 2 x CP 2 example on
// the shipped emulated cluster and profile, its K/V gathers on their own line item.
TEST(ExplainCliTest, ProfilePricesCpStages) {
  const auto r = hspmd::testing::run_hspmd(
      "explain --strategy " + kRoot + "/examples/strategies/local-cp2-tp2.json --model " + kRoot +
      "/configs/llama-tiny.json --cluster " + kRoot + "/examples/clusters/local-hetero-4.json --profile " + kRoot +
      "/examples/profiles/local-hetero-4-llama-tiny.json --seq-len 64");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("predicted step time: "));
  EXPECT_THAT(r.output, HasSubstr("stage 0 (slow TP2 CP2, 4 layers): per micro-batch "));
  EXPECT_THAT(r.output, HasSubstr(" s CP (K/V gathers)"));
}

// `--grad-bucket-mb` of `hspmd plan` and `hspmd explain --profile` is the buckets the cost model's
// overlap assumes: the plan and explain print the same prediction with the same buckets, and on the
// shipped TP 2 x CP 2 example (its gradient synced over the CP ranks) small buckets hide part of the
// sync behind the backward passes while 0 hides none.
TEST_F(PlanCliTest, PlanAndExplainPriceTheGradientBuckets) {
  write_cluster(1e9);
  const std::string model = kRoot + "/configs/llama-tiny.json";
  const auto plan = hspmd::testing::run_hspmd("plan --model " + model + " --cluster " + path("cluster.json") +
                                              " --profile " + path("profile.json") +
                                              " --global-batch 8 --seq-len 64 --grad-bucket-mb 0.05 --out " +
                                              path("s.json"));
  ASSERT_EQ(plan.code, 0) << plan.output;
  const auto explain = hspmd::testing::run_hspmd("explain --strategy " + path("s.json") + " --model " + model +
                                                 " --cluster " + path("cluster.json") + " --profile " +
                                                 path("profile.json") + " --seq-len 64 --grad-bucket-mb 0.05");
  ASSERT_EQ(explain.code, 0) << explain.output;
  const size_t at = plan.output.find("predicted step time: ");
  ASSERT_NE(at, std::string::npos) << plan.output;
  EXPECT_THAT(explain.output, HasSubstr(plan.output.substr(at, plan.output.find('\n', at) - at)));

  const std::string cp = "explain --strategy " + kRoot + "/examples/strategies/local-cp2-tp2.json --model " + model +
                         " --cluster " + kRoot + "/examples/clusters/local-hetero-4.json --profile " + kRoot +
                         "/examples/profiles/local-hetero-4-llama-tiny.json --seq-len 64 --grad-bucket-mb ";
  const auto small = hspmd::testing::run_hspmd(cp + "0.05"), none = hspmd::testing::run_hspmd(cp + "0");
  ASSERT_EQ(small.code, 0) << small.output;
  ASSERT_EQ(none.code, 0) << none.output;
  EXPECT_THAT(small.output, HasSubstr(" s behind backward passes)"));
  EXPECT_THAT(none.output, Not(HasSubstr("behind backward passes")));
  const auto negative = hspmd::testing::run_hspmd(cp + "-1");
  EXPECT_NE(negative.code, 0);
  EXPECT_THAT(negative.output, HasSubstr("--grad-bucket-mb"));
}

// `hspmd simulate`: the planner's plan written by `hspmd plan` as the fixed strategy, a loss and a
// return: the table has both policies, the JSON both runs with the planner's re-plans in its log,
// and a misspelled trace key is refused naming it.
TEST_F(PlanCliTest, SimulateComparesThePlannerWithAFixedStrategy) {
  write_cluster(1e9);
  const std::string model = kRoot + "/configs/llama-tiny.json";
  const std::string common = " --model " + model + " --cluster " + path("cluster.json") + " --profile " + path("profile.json");
  ASSERT_EQ(hspmd::testing::run_hspmd("plan" + common + " --global-batch 8 --seq-len 64 --no-zero1 --out " +
                                      path("s.json")).code, 0);
  std::ofstream(path("trace.json")) << R"({"name": "t", "seq_len": 64, "steps": 30, "global_batch": 8,
      "checkpoint": {"every": 10, "restore_seconds": 1},
      "events": [{"step": 10, "lose": "1"}, {"step": 20, "return": "1"}]})";
  const auto r = hspmd::testing::run_hspmd("simulate" + common + " --trace " + path("trace.json") + " --strategy " +
                                           path("s.json") + " --json " + path("out.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("policy"));
  EXPECT_THAT(r.output, HasSubstr("\nplanner "));
  EXPECT_THAT(r.output, HasSubstr("fixed: "));
  std::ifstream in(path("out.json"));
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(json, HasSubstr(R"("name": "planner")"));
  EXPECT_THAT(json, HasSubstr(R"("steps": 30)"));
  EXPECT_THAT(json, HasSubstr("before step 10 (lost 1)"));

  std::ofstream(path("bad.json")) << R"({"seq_len": 64, "steps": 3, "global_batch": 8, "event": []})";
  const auto bad = hspmd::testing::run_hspmd("simulate" + common + " --trace " + path("bad.json"));
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.output, HasSubstr(path("bad.json") + R"(: unknown key "event" (did you mean "events"?))"));
  const auto help = hspmd::testing::run_hspmd("simulate --help");
  EXPECT_THAT(help.output, HasSubstr("--trace"));
}

}  // namespace
}  // namespace hspmd::planner
