// Every collective on 2, 3 and 4 real processes started by `hspmd launch` (comm_worker.cc runs
// check_collectives: every dtype, odd and uneven counts, subgroups that exclude ranks, random
// many-to-many send/receive), and the same under mpirun-style variables without the launcher.
#include <gtest/gtest.h>

#include "comm/comm_testlib.h"

namespace hspmd::comm {
namespace {

using namespace std::chrono_literals;
using testing::binary_path;
using testing::Subprocess;

TEST(CollectivesDist, EveryCollectiveOnTwoThreeAndFourProcesses) {
  for (int n : {2, 3, 4}) {
    Subprocess p({binary_path("hspmd"), "launch", "-n", std::to_string(n), "--", binary_path("hspmd_comm_worker"),
                  "collectives"});
    ASSERT_EQ(p.finish(120s), 0) << p.output();
    for (int r = 0; r < n; ++r) {
      std::string line = "[rank " + std::to_string(r) + "] rank " + std::to_string(r) + " of " + std::to_string(n) +
                         " (hspmd launch): collectives ok";
      EXPECT_NE(p.output().find(line), std::string::npos) << p.output();
    }
  }
}

TEST(CollectivesDist, WorkersStartedByMpirunVariables) {
  testing::TempDir store;
  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int r = 0; r < 2; ++r) {
    workers.push_back(std::make_unique<Subprocess>(
        std::vector<std::string>{binary_path("hspmd_comm_worker"), "collectives"},
        std::vector<std::pair<std::string, std::string>>{{"OMPI_COMM_WORLD_RANK", std::to_string(r)},
                                                         {"OMPI_COMM_WORLD_SIZE", "2"},
                                                         {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(r)},
                                                         {"HSPMD_RUN_ID", "mpi"},
                                                         {"HSPMD_STORE", "file://" + store.path()}}));
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(workers[r]->finish(120s), 0) << workers[r]->output();
    EXPECT_NE(workers[r]->output().find("(mpirun): collectives ok"), std::string::npos) << workers[r]->output();
  }
}

}  // namespace
}  // namespace hspmd::comm
