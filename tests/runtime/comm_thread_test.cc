// The communication thread (runtime/comm_thread.h): jobs run in order off the caller's thread; a
// job's error stops the queue and surfaces at the next submit() or wait(), naming the owner and
// the thread; abandon() forgets the queue and the error; inline mode runs jobs in submit(); a
// ticket's wait returns once its job has run while later ones still run, and throws an earlier
// job's error.
#include "hspmd/runtime/comm_thread.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "hspmd/core/error.h"

namespace hspmd::runtime {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(CommThread, RunsJobsInOrderOffTheCallersThread) {
  CommThread comm("rank 3");
  std::vector<int> order;
  std::atomic<bool> elsewhere{true};
  const std::thread::id caller = std::this_thread::get_id();
  for (int i = 0; i < 5; ++i) {
    comm.submit([&, i] {
      order.push_back(i);
      if (std::this_thread::get_id() == caller) elsewhere = false;
    });
  }
  comm.wait();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(elsewhere);
}

TEST(CommThread, AnErrorDropsTheQueueAndSurfacesOnceNamingTheThread) {
  CommThread comm("rank 3 (gradient sync)");
  std::atomic<bool> gate{false};
  std::atomic<int> ran{0};
  comm.submit([&] {
    while (!gate) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    throw Error("allreduce over [1, 3]: timed out after 2000 ms");
  });
  comm.submit([&] { ++ran; });  // queued behind the failure: never runs
  gate = true;
  try {
    comm.wait();
    ADD_FAILURE() << "wait() returned after a failed job";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr("rank 3 (gradient sync): the communication thread failed"),
                                             HasSubstr("allreduce over [1, 3]: timed out")));
  }
  EXPECT_EQ(ran, 0);
  comm.submit([&] { ++ran; });  // reported once: the thread works again
  comm.wait();
  EXPECT_EQ(ran, 1);
}

TEST(CommThread, WaitForATicketReturnsOnceItsJobRanWhileLaterOnesRun) {
  CommThread comm("rank 1");
  std::atomic<bool> gate{false};
  std::atomic<int> ran{0};
  const uint64_t first = comm.submit([&] { ++ran; });
  const uint64_t second = comm.submit([&] {
    while (!gate) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ++ran;
  });
  EXPECT_LT(first, second);
  comm.wait_for(first);  // the second job still waits for the gate
  EXPECT_EQ(ran, 1);
  gate = true;
  comm.wait_for(second);
  EXPECT_EQ(ran, 2);
}

TEST(CommThread, WaitForALaterTicketThrowsAnEarlierJobsError) {
  CommThread comm("rank 2 (gradient sync)");
  comm.submit([] { throw Error("allgather over [0, 2]: timed out after 500 ms"); });
  const uint64_t gather = comm.submit([] {});  // dropped behind the failure
  try {
    comm.wait_for(gather);
    ADD_FAILURE() << "wait_for() returned after a failed job";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr("rank 2 (gradient sync): the communication thread failed"),
                                             HasSubstr("allgather over [0, 2]: timed out")));
  }
  comm.wait_for(comm.submit([] {}));  // reported once: the thread works again
}

TEST(CommThread, SubmitAfterAFailureThrowsIt) {
  CommThread comm("rank 0");
  comm.submit([] { throw Error("peer 1 closed the connection"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  bool thrown = false;
  for (int tries = 0; tries < 200 && !thrown; ++tries) {  // until the thread has run the job
    try {
      comm.submit([] {});
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } catch (const Error& e) {
      thrown = true;
      EXPECT_THAT(std::string(e.what()), HasSubstr("peer 1 closed the connection"));
    }
  }
  EXPECT_TRUE(thrown);
}

TEST(CommThread, AbandonForgetsTheQueueAndTheError) {
  CommThread comm("rank 0");
  std::atomic<bool> gate{false};
  std::atomic<int> ran{0};
  comm.submit([&] {
    while (!gate) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    throw Error("aborted: rank 2 died");
  });
  comm.submit([&] { ++ran; });
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate = true;
  });
  comm.abandon();  // waits for the running job
  release.join();
  EXPECT_EQ(ran, 0);
  comm.wait();  // nothing left, no error
}

TEST(CommThread, InlineRunsInSubmitAndThrowsAsIs) {
  CommThread comm("rank 0", /*threaded=*/false);
  EXPECT_FALSE(comm.threaded());
  const std::thread::id caller = std::this_thread::get_id();
  bool same = false;
  comm.submit([&] { same = std::this_thread::get_id() == caller; });
  EXPECT_TRUE(same);
  EXPECT_THROW(comm.submit([] { throw Error("x"); }), Error);
  comm.wait();
}

}  // namespace
}  // namespace hspmd::runtime
