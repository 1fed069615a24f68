// `hspmd train --strategy-for-max-len` through the built binary with 4 worker processes: a
// long-tailed dataset (`hspmd data long-tailed`), two strategies chosen per batch by maximum length
// with switches between them, losses equal to the single-process run (--check-single); `--dispatch`
// on one strategy, likewise; and a batch longer than every strategy's maximum length refused with
// its length and the limit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "planner/planner_testlib.h"
#include "run_hspmd.h"

namespace hspmd::tuning {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const std::string kRoot = fs::path(__FILE__).parent_path().parent_path().parent_path().string();

class DispatchCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::ifstream(hspmd::testing::hspmd_binary()).good()) << "hspmd not built (set HSPMD_BINARY_DIR)";
    dir_ = fs::temp_directory_path() / ("hspmd-dispatch-cli-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(path("profile.json")) << planner::testing::two_kind_profile().to_json_text();
    std::ofstream(path("cluster.json")) << R"({"name": "four", "devices": [
        {"id": 0, "node": 0, "type": "fast", "memory": 1e9}, {"id": 1, "node": 0, "type": "fast", "memory": 1e9},
        {"id": 2, "node": 0, "type": "slow", "memory": 1e9}, {"id": 3, "node": 0, "type": "slow", "memory": 1e9}],
        "intra_node_bandwidth": 1e10, "inter_node_bandwidth": 1e10})";
    std::ofstream(path("short.json")) << R"({"name": "short", "pipelines": [
        {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
        {"micro_batch_size": 1, "num_micro_batches": 2,
         "stages": [{"ranks": "2", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}]})";
    std::ofstream(path("long.json")) << R"({"name": "long", "pipelines": [
        {"micro_batch_size": 1, "num_micro_batches": 2,
         "stages": [{"ranks": "0-1", "layers": "0-1"}, {"ranks": "2-3", "layers": "2-3"}]}]})";
    auto r = hspmd::testing::run_hspmd("data prepare --input " + kRoot + "/data/corpus/kjv-genesis-2kings.txt" +
                                       " --output " + path("kjv") + " --append-eos");
    ASSERT_EQ(r.code, 0) << r.output;
    r = hspmd::testing::run_hspmd("data long-tailed --source " + path("kjv") + " --output " + path("mixed") +
                                  " --documents 600 --median 8 --max-length 64 --sigma 0.8 --seed 1");
    ASSERT_EQ(r.code, 0) << r.output;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string train(const std::string& strategies) const {
    return "train --model " + kRoot + "/configs/llama-tiny.json --data " + path("mixed") +
           " --steps 6 --seq-len 64 --global-batch-tokens 128 --threads 1 --nproc 4 --cluster " + path("cluster.json") +
           " --profile " + path("profile.json") + " " + strategies;
  }
  fs::path dir_;
};

TEST_F(DispatchCliTest, StrategiesPerMaximumLengthSwitchPerBatchAndMatchSingleProcess) {
  const auto r = hspmd::testing::run_hspmd(train("--strategy-for-max-len 64:" + path("long.json") +
                                                 " --strategy-for-max-len 48:" + path("short.json") + " --check-single"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("strategy short for batches up to 48 tokens"));
  EXPECT_THAT(r.output, HasSubstr("dispatch step 1: strategy "));
  EXPECT_THAT(r.output, HasSubstr("switch after step"));  // both strategies ran
  EXPECT_THAT(r.output, HasSubstr("losses match the single-process run"));
  EXPECT_THAT(r.output, HasSubstr("PASS"));
}

// --switch-states bf16-params: the weights and Adam moments stay under the first batch's strategy;
// steps under the other get bf16 weights and send their gradients back (docs/switching.md). The
// single-process check allows for the bf16 rounding of the weights no kernel rounds (2e-3).
TEST_F(DispatchCliTest, Bf16OnlySwitchesPerBatchMatchSingleProcess) {
  const std::string strategies =
      "--strategy-for-max-len 64:" + path("long.json") + " --strategy-for-max-len 48:" + path("short.json");
  const auto r = hspmd::testing::run_hspmd(train(strategies + " --precision bf16 --switch-states bf16-params --check-single"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("bf16 only: weights and Adam moments stay under plan short"));
  EXPECT_THAT(r.output, HasSubstr("| bf16 switch short -> long: params out "));
  EXPECT_THAT(r.output, HasSubstr("(tolerance 2e-03): PASS"));

  const auto fp32 = hspmd::testing::run_hspmd(train(strategies + " --switch-states bf16-params"));
  EXPECT_NE(fp32.code, 0);
  EXPECT_THAT(fp32.output, HasSubstr("--switch-states bf16-params moves the parameters as bf16 values: it needs "
                                     "--precision bf16"));
}

// --base-strategy long: the state lives under the long strategy instead of the first batch's
// (short); the trainer starts there and switches (bf16 only) to short before step 1, and every step
// under short moves its bf16 weights from long.
TEST_F(DispatchCliTest, Bf16OnlySwitchesKeepTheStateUnderTheBaseStrategy) {
  const std::string strategies =
      "--strategy-for-max-len 64:" + path("long.json") + " --strategy-for-max-len 48:" + path("short.json");
  const auto r = hspmd::testing::run_hspmd(train(strategies + " --precision bf16 --switch-states bf16-params " +
                                                 "--base-strategy " + path("long.json") + " --check-single"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("switch after step 0: plan long -> short (specialized now), bf16 only: weights and "
                                  "Adam moments stay under plan long"));
  EXPECT_THAT(r.output, HasSubstr("| bf16 switch long -> short: params out "));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("| bf16 switch short -> ")));
  EXPECT_THAT(r.output, HasSubstr("(tolerance 2e-03): PASS"));

  // The header predicts the bf16-only switch the steps pay, not the full switch of float32 weights
  // and Adam moments: the bytes each step under short moves (as its step log reports them) and the
  // seconds the dispatch decisions count as its switch.
  EXPECT_THAT(r.output, HasSubstr("strategy long for batches up to 64 tokens: 1 pipeline(s), longest sequence each "
                                  "holds"));
  EXPECT_THAT(r.output, HasSubstr("; holds the weights and Adam moments (bf16-only switches)"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("; switch to ")));
  std::smatch header;
  ASSERT_TRUE(std::regex_search(r.output, header,
                                std::regex("each step under it, bf16 only from long: params out ([^,]+), grads back "
                                           "(.+) \\((\\d+) bytes\\), predicted (\\S+) s")))
      << r.output;
  EXPECT_GT(std::stoll(header[3]), 0);
  EXPECT_THAT(r.output, HasSubstr("| bf16 switch long -> short: params out " + header[1].str()));
  EXPECT_THAT(r.output, HasSubstr(", grads back " + header[2].str()));
  std::smatch decision;
  ASSERT_TRUE(std::regex_search(r.output, decision,
                                std::regex("dispatch step \\d+: strategy short \\(predicted[^|]*; switch (\\S+) s")))
      << r.output;
  EXPECT_GT(std::stod(header[4]), 0);
  EXPECT_NEAR(std::stod(decision[1]), std::stod(header[4]), 1e-3 * std::stod(header[4]));  // printed with 4 digits
}

TEST_F(DispatchCliTest, DispatchOnOneStrategyMatchesSingleProcess) {
  const auto r = hspmd::testing::run_hspmd(train("--strategy " + path("short.json") + " --dispatch --check-single"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("strategy short for batches up to 64 tokens"));
  EXPECT_THAT(r.output, HasSubstr("dispatch step 6: strategy short"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("switch after step")));
  EXPECT_THAT(r.output, HasSubstr("PASS"));
}

TEST_F(DispatchCliTest, ABatchLongerThanEveryStrategyIsRefused) {
  const auto r = hspmd::testing::run_hspmd(train("--strategy-for-max-len 32:" + path("short.json")));
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("is longer than every strategy of the run can hold: the largest maximum length is 32"));
  const auto no_cluster = hspmd::testing::run_hspmd("train --model " + kRoot + "/configs/llama-tiny.json --data " +
                                                    path("mixed") + " --nproc 4 --strategy-for-max-len 32:" + path("short.json"));
  EXPECT_NE(no_cluster.code, 0);
  EXPECT_THAT(no_cluster.output, HasSubstr("need --cluster"));
}

}  // namespace
}  // namespace hspmd::tuning
