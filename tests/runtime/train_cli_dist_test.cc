// `hspmd train --strategy` through the built binary and real worker processes: a heterogeneous
// 4-process run on emulated devices whose losses match a single-process retraining (the demo's
// check), a resume under another strategy, and a plan refused up front for an emulated memory cap.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::run_hspmd;

class TrainCli : public testing::TempDirTest {
 protected:
  std::string common(int steps) const {
    return "train --model " + (testing::source_dir() / "configs/llama-tiny.json").string() + " --data " +
           testing::corpus_dataset() + " --steps " + std::to_string(steps) +
           " --seq-len 64 --global-batch-tokens 512 --warmup 2 --threads 1";
  }
  std::string example(const std::string& rel) const { return (testing::source_dir() / rel).string(); }
};

TEST_F(TrainCli, HeterogeneousStrategyOnEmulatedDevicesMatchesOneProcess) {
  const std::string trace = path("trace.json");
  testing::CommandResult r = run_hspmd(common(3) + " --nproc 4 --strategy " +
                                       example("examples/strategies/local-hetero-4.json") + " --devices " +
                                       example("examples/devices/local-hetero-4.json") + " --trace " + trace +
                                       " --check-single");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("emulated devices: rank 0 fast"), HasSubstr("pipeline 1, stage 2/2"),
                              HasSubstr("step     3/3"), HasSubstr("losses match the single-process run"),
                              HasSubstr("PASS")));
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(std::filesystem::exists(path("trace.rank" + std::to_string(rank) + ".json"))) << rank;
  }
}

// The resumed run also recomputes activations (TP 2 x PP 2), from the command line.
TEST_F(TrainCli, SaveUnderOneStrategyResumeUnderAnother) {
  const std::string ckpt = path("ckpt");
  testing::CommandResult a = run_hspmd(common(2) + " --decay-steps 4 --nproc 2 --strategy " +
                                       example("examples/strategies/local-dp2.json") + " --save " + ckpt);
  ASSERT_EQ(a.code, 0) << a.output;
  testing::CommandResult b =
      run_hspmd(common(4) + " --nproc 4 --strategy " + example("examples/strategies/local-tp2-pp2.json") +
                " --resume " + ckpt + " --recompute");
  ASSERT_EQ(b.code, 0) << b.output;
  EXPECT_THAT(b.output, AllOf(HasSubstr("resumed from"), HasSubstr("at step 2"), HasSubstr("step     4/4"),
                              HasSubstr("recomputing each layer in B")));
}

TEST_F(TrainCli, PlanBeyondEmulatedMemoryIsRefusedUpFront) {
  const std::string strategy = path("one.json");
  std::ofstream(strategy) << R"({"name": "one", "pipelines": [{"micro_batch_size": 8, "num_micro_batches": 1,
                                 "stages": [{"ranks": "0", "layers": "0-3"}]}]})";
  testing::CommandResult r = run_hspmd(common(1) + " --nproc 1 --strategy " + strategy + " --devices " +
                                       example("examples/devices/tiny-memory.json"));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.output, AllOf(HasSubstr("rank 0 (tiny)"), HasSubstr("needs about"),
                              HasSubstr("capacity of 1048576 bytes")));
}

// --switch: TP 2 x PP 2, then 2-way data parallelism (ranks 2-3 wait as spares), then back, each
// switch one fused BSR without a restart; the losses stay those of one process, and the metrics
// record each switch.
TEST_F(TrainCli, SwitchesStrategiesMidRunWithoutRestart) {
  const std::string metrics = path("metrics.jsonl");
  testing::CommandResult r = run_hspmd(common(5) + " --nproc 4 --strategy " +
                                       example("examples/strategies/local-tp2-pp2.json") + " --switch 3:" +
                                       example("examples/strategies/local-dp2.json") + " --switch 5:" +
                                       example("examples/strategies/local-tp2-pp2.json") + " --metrics " + metrics +
                                       " --check-single");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("switch after step 2: plan local-tp2-pp2 -> local-dp2 (specialized now)"),
                              HasSubstr("switch after step 4: plan local-dp2 -> local-tp2-pp2 (cached graphs)"),
                              HasSubstr("rank 3: spare under plan local-dp2"), HasSubstr("PASS")));
  std::ifstream in(metrics);
  int switches = 0, steps = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.value("event", "") == "switch") {
      ++switches;
      EXPECT_GT(j.at("sent_bytes").get<int64_t>(), 0) << line;
      EXPECT_GT(j.at("sent_bytes_by_tier").at("intra-node").get<int64_t>(), 0) << line;
      EXPECT_GT(j.at("bsr_seconds").get<double>(), 0) << line;
      EXPECT_GE(j.at("total_seconds").get<double>(), j.at("bsr_seconds").get<double>()) << line;
    } else {
      ++steps;
    }
  }
  EXPECT_EQ(switches, 2);
  EXPECT_EQ(steps, 5);
}

TEST_F(TrainCli, BadSwitchIsRefusedBeforeTraining) {
  testing::CommandResult r = run_hspmd(common(4) + " --nproc 4 --strategy " +
                                       example("examples/strategies/local-tp2-pp2.json") + " --switch 9:" +
                                       example("examples/strategies/local-dp2.json"));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.output, HasSubstr("--switch 9:"));
  EXPECT_THAT(r.output, HasSubstr("the run has only 4 steps"));
}

TEST_F(TrainCli, WorldSizeMustMatchTheStrategy) {
  testing::CommandResult r =
      run_hspmd(common(1) + " --nproc 2 --strategy " + example("examples/strategies/local-hetero-4.json"));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.output, HasSubstr("but the run has 2 workers"));
}

}  // namespace
}  // namespace hspmd::runtime
