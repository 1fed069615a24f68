// Fencing with real worker processes: a worker that hangs (SIGSTOP through HSPMD_FAULT, heartbeat
// thread and all) is declared dead by its peers and SIGKILLed by its launcher, so it can never
// resume into a run that moved on, and the launcher never waits for it; the run goes on from a
// replica or ends with a clear error. Workers that all die one after another while restarts are
// allowed end the run instead of leaving a restarted worker waiting for an admission nobody gives.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::run_hspmd;

// Two pipelines of two stages, no ZeRO: every slice of the state lives on two ranks.
constexpr const char* kDataParallelStrategy = R"({"name": "dp2-pp2", "zero1": false,
  "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1", "layers": "2-3"}]},
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}]})";

class Fencing : public testing::TempDirTest {
 protected:
  std::string example(const std::string& rel) const { return (testing::source_dir() / rel).string(); }
  std::string elastic(const std::string& strategy, int steps) const {
    return "train --model " + example("configs/llama-tiny.json") + " --data " + testing::corpus_dataset() +
           " --steps " + std::to_string(steps) +
           " --seq-len 64 --global-batch-tokens 256 --warmup 2 --lr 2.5e-4 --min-lr 2.5e-5 --threads 1 --nproc 4"
           " --strategy " + strategy + " --elastic --cluster " + example("examples/clusters/local-hetero-4.json") +
           " --profile " + example("examples/profiles/local-hetero-4-llama-tiny.json") + " --heartbeat-timeout 2";
  }
  testing::CommandResult run_with_faults(const std::string& faults, const std::string& args) const {
    ::setenv("HSPMD_FAULT", faults.c_str(), 1);
    testing::CommandResult r = run_hspmd(args);
    ::unsetenv("HSPMD_FAULT");
    return r;
  }
  std::string dp2_pp2() {
    const std::string strategy = path("dp2-pp2.json");
    std::ofstream(strategy) << kDataParallelStrategy;
    return strategy;
  }
};

TEST_F(Fencing, StoppedWorkerIsFencedAndTheRunGoesOnFromAReplica) {
  const testing::CommandResult r = run_with_faults("1:3:backward:stop", elastic(dp2_pp2(), 5) + " --check-single");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("HSPMD_FAULT: stopping myself (SIGSTOP) in backward of step 3"));
  EXPECT_THAT(r.output, HasSubstr("fencing rank 1 (SIGKILL): "));
  EXPECT_THAT(r.output, HasSubstr("rank 1 was fenced: signal 9 (Killed)"));
  EXPECT_THAT(r.output, HasSubstr("recovery: ranks [1] lost"));
  EXPECT_THAT(r.output, HasSubstr("PASS"));
}

TEST_F(Fencing, StoppedWorkerWithoutReplicaIsFencedAndTheRunEndsWithAClearError) {
  const testing::CommandResult r =
      run_with_faults("2:3:backward:stop", elastic(example("examples/strategies/local-hetero-4.json"), 6));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.output, HasSubstr("fencing rank 2 (SIGKILL): "));
  EXPECT_THAT(r.output, HasSubstr("there is no complete checkpoint to fall back to"));
  // The launcher reports the survivors' error, not the SIGKILL it sent itself.
  EXPECT_THAT(r.output, HasSubstr("launcher exit code 1)"));
}

TEST_F(Fencing, EveryWorkerDyingOneAfterAnotherWithRestartsEndsTheRun) {
  const testing::CommandResult r = run_with_faults("0:3:forward,1:3:backward,2:3:grad-sync,3:3:optimizer",
                                                   elastic(dp2_pp2(), 6) + " --max-restarts 1");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("restarting rank 0 (restart 1 of 1)"));
  EXPECT_THAT(r.output, HasSubstr("no running worker to rejoin"));
  EXPECT_THAT(r.output, Not(HasSubstr("timed out waiting for admission")));
}

}  // namespace
}  // namespace hspmd::runtime
