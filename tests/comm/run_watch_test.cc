// RunWatch: what the launcher knows of its run comes from a thread of its own, so a store call
// hanging on a cut link delays neither the launcher's view nor its exit.
#include <gtest/gtest.h>

#include <thread>

#include "comm/blocking_store_testlib.h"
#include "comm/comm_testlib.h"
#include "hspmd/comm/file_store.h"
#include "hspmd/comm/heartbeat.h"
#include "hspmd/comm/run_watch.h"

namespace hspmd::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(RunWatch, ReadsGenerationsAndBeatsAndPublishesDeaths) {
  testing::TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  store->set("gen1/members", "0,1,2");
  store->set("gen2/members", "0,1");
  store->set(heartbeat_key(2), "7");
  RunWatch watch(store, {2, 3}, /*generation=*/1, 20ms);
  watch.publish_death(3, "signal 9 (Killed)");
  std::vector<std::pair<int, std::vector<int>>> generations;
  RunWatch::Reading r;
  const auto start = Clock::now();
  while (Clock::now() - start < 20s) {
    r = watch.take();
    generations.insert(generations.end(), r.generations.begin(), r.generations.end());
    if (!r.beats.empty() && store->try_get(dead_notices_key())) break;
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_FALSE(r.beats.empty()) << "no reading in 20 s";
  EXPECT_TRUE(r.error.empty()) << r.error;
  // Only the generations after the one given, once each.
  ASSERT_EQ(generations.size(), 1u);
  EXPECT_EQ(generations[0].first, 2);
  EXPECT_EQ(generations[0].second, (std::vector<int>{0, 1}));
  EXPECT_EQ(r.beats.at(2), "7");
  EXPECT_EQ(r.beats.at(3), std::nullopt);
  EXPECT_EQ(store->try_get(dead_key(3)), "signal 9 (Killed)");
  EXPECT_EQ(store->try_get(dead_notices_key()), "1");
}

TEST(RunWatch, NeitherTakeNorStoppingWaitsForAHangingStoreCall) {
  testing::TempDir dir;
  auto store = std::make_shared<testing::BlockingStore>(std::make_shared<FileStore>(dir.path()));
  const testing::ReleaseOnExit release{*store};
  auto watch = std::make_unique<RunWatch>(store, std::vector<int>{0}, 0, 10ms);
  const auto start = Clock::now();
  while (watch->take().beats.empty() && Clock::now() - start < 20s) std::this_thread::sleep_for(5ms);
  store->block();
  while (store->hanging == 0 && Clock::now() - start < 20s) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(store->hanging, 1);
  const RunWatch::Reading before = watch->take();  // answers from the last reading
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(watch->take().read_at, before.read_at) << "a reading completed while the store hung";
  watch.reset();  // returns with the call still hanging
  EXPECT_EQ(store->hanging, 1);
  const int started = store->started;
  store->release();
  std::this_thread::sleep_for(100ms);  // ten periods
  EXPECT_EQ(store->hanging, 0);
  EXPECT_EQ(store->started, started) << "the stopped watch started another store call";
}

}  // namespace
}  // namespace hspmd::comm
