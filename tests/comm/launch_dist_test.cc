// `hspmd launch` as a real process: the environment of its workers, rank-prefixed output, the
// stop-all path and its exit codes, signal forwarding, the grace period and --elastic.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "comm/comm_testlib.h"

namespace hspmd::comm {
namespace {

using namespace std::chrono_literals;
using testing::binary_path;
using testing::Subprocess;
using Clock = std::chrono::steady_clock;

std::vector<std::string> launch(std::vector<std::string> launcher_args, const std::string& shell) {
  std::vector<std::string> argv{binary_path("hspmd"), "launch"};
  argv.insert(argv.end(), launcher_args.begin(), launcher_args.end());
  argv.insert(argv.end(), {"--", "sh", "-c", shell});
  return argv;
}

// A run id no other test process (another build tree, a concurrent ctest) uses at the same time,
// since without --store the launcher's file store is named after it.
std::string unique_run_id(const std::string& prefix) { return prefix + "-" + std::to_string(::getpid()); }

TEST(Launch, WorkersGetTheirEnvironmentAndPrefixedOutput) {
  const std::string run_id = unique_run_id("envtest");
  Subprocess p(launch({"-n", "3", "--run-id", run_id},
                      "echo \"r=$RANK w=$WORLD_SIZE l=$LOCAL_RANK id=$HSPMD_RUN_ID s=$HSPMD_STORE\"; "
                      "printf 'to stderr\\nno newline' >&2"));
  EXPECT_EQ(p.finish(60s), 0) << p.output();
  for (int r = 0; r < 3; ++r) {
    std::string rank = std::to_string(r);
    EXPECT_NE(p.output().find("[rank " + rank + "] r=" + rank + " w=3 l=" + rank +
                              " id=" + run_id + " s=file:///tmp/hspmd-" + run_id + "\n"),
              std::string::npos)
        << p.output();
    EXPECT_NE(p.output().find("[rank " + rank + "] to stderr\n"), std::string::npos) << p.output();
    EXPECT_NE(p.output().find("[rank " + rank + "] no newline\n"), std::string::npos) << p.output();
  }
}

TEST(Launch, SecondNodeGetsItsRankRange) {
  const testing::TempDir store;
  Subprocess p(launch({"-n", "2", "--nnodes", "2", "--node-rank", "1", "--run-id", "n2", "--store",
                       "file://" + store.path()},
                      "echo \"r=$RANK w=$WORLD_SIZE l=$LOCAL_RANK\""));
  EXPECT_EQ(p.finish(60s), 0) << p.output();
  EXPECT_NE(p.output().find("[rank 2] r=2 w=4 l=0"), std::string::npos) << p.output();
  EXPECT_NE(p.output().find("[rank 3] r=3 w=4 l=1"), std::string::npos) << p.output();
}

TEST(Launch, FailedWorkerStopsTheRestWithItsExitStatus) {
  auto start = Clock::now();
  // The others would sleep 300 s; 60 s leaves a loaded machine room and still shows they were stopped.
  Subprocess p(launch({"-n", "3"}, "if [ \"$RANK\" = 1 ]; then exit 3; fi; exec sleep 300"));
  EXPECT_EQ(p.finish(120s), 3) << p.output();
  EXPECT_LT(Clock::now() - start, 60s) << "the other workers were not stopped";
  EXPECT_NE(p.output().find("rank 1 failed with exit status 3; stopping the other workers"), std::string::npos)
      << p.output();
}

TEST(Launch, KilledWorkerIsNamedWithItsSignal) {
  Subprocess p(launch({"-n", "3"}, "if [ \"$RANK\" = 2 ]; then kill -9 $$; fi; exec sleep 300"));
  EXPECT_EQ(p.finish(60s), 128 + 9) << p.output();
  EXPECT_NE(p.output().find("rank 2 failed with signal 9 (Killed)"), std::string::npos) << p.output();
}

TEST(Launch, SigtermIsForwardedToEveryWorker) {
  Subprocess p(launch({"-n", "2"}, "trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 0.05; done"));
  ASSERT_TRUE(p.wait_for_output("[rank 1] ready", 60s) && p.wait_for_output("[rank 0] ready", 60s)) << p.output();
  ::kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.finish(60s), 128 + SIGTERM) << p.output();
  EXPECT_NE(p.output().find("[rank 0] got TERM"), std::string::npos) << p.output();
  EXPECT_NE(p.output().find("[rank 1] got TERM"), std::string::npos) << p.output();
}

TEST(Launch, WorkerIgnoringSigtermIsKilledAfterTheGracePeriod) {
  auto start = Clock::now();
  Subprocess p(launch({"-n", "2", "--grace", "0.3"}, "trap '' TERM INT; echo ready; while :; do sleep 0.05; done"));
  ASSERT_TRUE(p.wait_for_output("[rank 1] ready", 60s) && p.wait_for_output("[rank 0] ready", 60s)) << p.output();
  ::kill(p.pid(), SIGINT);
  EXPECT_EQ(p.finish(120s), 128 + SIGINT) << p.output();
  EXPECT_LT(Clock::now() - start, 60s) << "the workers ignoring SIGTERM run forever unless killed";
  EXPECT_NE(p.output().find("sending SIGKILL"), std::string::npos) << p.output();
}

TEST(Launch, ElasticKeepsSurvivorsRunning) {
  Subprocess p(launch({"-n", "3", "--elastic"},
                      "if [ \"$RANK\" = 0 ]; then exit 4; fi; sleep 0.5; echo survived"));
  EXPECT_EQ(p.finish(60s), 0) << p.output();
  EXPECT_NE(p.output().find("rank 0 failed with exit status 4; --elastic: 2 local workers keep running"),
            std::string::npos)
      << p.output();
  EXPECT_NE(p.output().find("[rank 1] survived"), std::string::npos) << p.output();
  EXPECT_NE(p.output().find("[rank 2] survived"), std::string::npos) << p.output();
}

TEST(Launch, ElasticRestartsADeadWorkerUpToMaxRestarts) {
  // Rank 1's first two incarnations fail; --max-restarts 2 starts it twice more, and the third
  // incarnation (HSPMD_RESTART_COUNT=2) succeeds.
  Subprocess p(launch({"-n", "2", "--elastic", "--max-restarts", "2"},
                      "if [ \"$RANK\" = 1 ] && [ \"$HSPMD_RESTART_COUNT\" -lt 2 ]; then exit 3; fi; "
                      "echo incarnation $HSPMD_RESTART_COUNT done"));
  EXPECT_EQ(p.finish(60s), 0) << p.output();
  EXPECT_NE(p.output().find("restarting rank 1 (restart 1 of 2)"), std::string::npos) << p.output();
  EXPECT_NE(p.output().find("restarting rank 1 (restart 2 of 2)"), std::string::npos) << p.output();
  EXPECT_NE(p.output().find("[rank 1] incarnation 2 done"), std::string::npos) << p.output();
  EXPECT_NE(p.output().find("[rank 0] incarnation 0 done"), std::string::npos) << p.output();
  Subprocess without({binary_path("hspmd"), "launch", "-n", "2", "--max-restarts", "1", "--", "true"});
  EXPECT_NE(without.finish(60s), 0) << without.output();
  EXPECT_NE(without.output().find("needs --elastic"), std::string::npos) << without.output();
}

TEST(Launch, MissingProgramAndBadOptions) {
  Subprocess missing({binary_path("hspmd"), "launch", "-n", "2", "--", "/nonexistent/program"});
  EXPECT_EQ(missing.finish(60s), 127) << missing.output();
  EXPECT_NE(missing.output().find("cannot run '/nonexistent/program'"), std::string::npos) << missing.output();
  Subprocess multi({binary_path("hspmd"), "launch", "-n", "2", "--nnodes", "2", "--", "true"});
  EXPECT_EQ(multi.finish(60s), 1) << multi.output();
  EXPECT_NE(multi.output().find("needs --run-id and --store"), std::string::npos) << multi.output();
}

}  // namespace
}  // namespace hspmd::comm
