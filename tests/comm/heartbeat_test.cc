// Heartbeat and Membership with ranks as threads over one file store: a rank that stops beating
// is declared dead within the timeout, a death notice is seen at once, and survivors agree on
// the same next membership.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include <future>
#include <thread>

#include "comm/blocking_store_testlib.h"
#include "comm/comm_testlib.h"
#include "hspmd/comm/file_store.h"
#include "hspmd/comm/heartbeat.h"
#include "hspmd/comm/membership.h"
#include "hspmd/core/error.h"

namespace hspmd::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// The timeout is long next to the interval, so a heartbeat thread delayed by a loaded machine (CI
// runs every test on 2 cores) is not mistaken for a death; the bounds still catch a detector that
// never fires, fires long after the timeout, or fires before it.
TEST(Heartbeat, SilentPeerIsDeclaredDeadWithinTheTimeout) {
  testing::TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  HeartbeatOptions options{.interval = 50ms, .timeout = 1s};
  Heartbeat a(store, 0, {0, 1, 2}, options);
  auto c = std::make_unique<Heartbeat>(store, 2, std::vector<int>{0, 1, 2}, options);
  {
    Heartbeat b(store, 1, {0, 1, 2}, options);
    std::this_thread::sleep_for(1500ms);
    EXPECT_TRUE(a.dead().empty()) << "live peers declared dead";
  }  // rank 1 stops beating here
  auto stopped = Clock::now();
  while (!a.is_dead(1) && Clock::now() - stopped < 20s) std::this_thread::sleep_for(5ms);
  auto detected = Clock::now() - stopped;
  EXPECT_TRUE(a.is_dead(1));
  EXPECT_LT(detected, 1s + 8s) << "detection took far longer than the timeout";
  EXPECT_GE(detected, 500ms) << "declared dead well before the timeout";
  EXPECT_EQ(a.dead(), std::vector<int>{1});
  EXPECT_FALSE(c->is_dead(0));
}

TEST(Heartbeat, DeathNoticeIsSeenAtOnce) {
  testing::TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  // A 60 s timeout: seeing the death within 10 s (slack for a loaded machine) can only come from
  // the notice.
  Heartbeat a(store, 0, {0, 1}, {.interval = 20ms, .timeout = 60s});
  store->set(dead_key(1), "signal 9 (Killed)");
  auto start = Clock::now();
  while (!a.is_dead(1) && Clock::now() - start < 15s) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(a.is_dead(1));
  EXPECT_LT(Clock::now() - start, 10s);
}

TEST(Heartbeat, PublishedDeathIsSeenBetweenSparseBeats) {
  testing::TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  // Beats every 30 s: seeing the death within 10 s can only come from the notice counter, read
  // every notice_poll between beats.
  Heartbeat a(store, 0, {0, 1, 2}, {.interval = 30s, .notice_poll = 20ms, .timeout = 60s});
  publish_death(*store, 2, "signal 9 (Killed)");
  auto start = Clock::now();
  while (!a.is_dead(2) && Clock::now() - start < 15s) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(a.is_dead(2));
  EXPECT_LT(Clock::now() - start, 10s);
  EXPECT_FALSE(a.is_dead(1));
}

TEST(Heartbeat, RejectsTimeoutNotAboveInterval) {
  testing::TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  EXPECT_THROW(Heartbeat(store, 0, {0, 1}, {.interval = 100ms, .timeout = 100ms}), Error);
}

TEST(Membership, SurvivorsAgreeOnTheSameNextGeneration) {
  testing::TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  HeartbeatOptions options{.interval = 20ms, .timeout = 300ms};
  // Rank 2 never starts: survivors 0, 1, 3 must agree on [0,1,3] once rank 2 misses its beats.
  std::vector<std::future<std::vector<int>>> results;
  for (int rank : {0, 1, 3}) {
    results.push_back(std::async(std::launch::async, [&, rank] {
      Heartbeat hb(store, rank, {0, 1, 2, 3}, options);
      Membership m(store, rank, {0, 1, 2, 3});
      std::this_thread::sleep_for(std::chrono::milliseconds(10 * rank));  // join at different times
      auto members = m.regroup(hb, 5s);
      EXPECT_EQ(m.generation(), 1);
      return members;
    }));
  }
  for (auto& r : results) EXPECT_EQ(r.get(), (std::vector<int>{0, 1, 3}));
}

TEST(Heartbeat, OnDeathIsCalledOncePerDeadPeerWithHowItDied) {
  testing::TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::mutex mutex;
  std::vector<std::pair<int, std::string>> deaths;
  store->set(dead_key(2), "signal 9 (Killed)");
  {
    Heartbeat hb(store, 0, {0, 1, 2}, {.interval = 20ms, .timeout = 300ms, .on_death = [&](int rank, const std::string& how) {
                                         std::lock_guard<std::mutex> lock(mutex);
                                         deaths.emplace_back(rank, how);
                                       }});
    std::this_thread::sleep_for(800ms);  // rank 1 never beats: dead after 300 ms
  }
  std::sort(deaths.begin(), deaths.end());
  ASSERT_EQ(deaths.size(), 2u);
  EXPECT_EQ(deaths[0].first, 1);
  EXPECT_NE(deaths[0].second.find("no heartbeat for 300 ms"), std::string::npos) << deaths[0].second;
  EXPECT_EQ(deaths[1].first, 2);
  EXPECT_NE(deaths[1].second.find("signal 9 (Killed)"), std::string::npos) << deaths[1].second;
}

TEST(Membership, CandidateThatAskedToJoinBecomesAMember) {
  testing::TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  Heartbeat hb(store, 0, {0}, {.interval = 20ms, .timeout = 5s});
  Membership m(store, 0, {0});
  store->set("gen1/join/3", "1");  // rank 3 asked to join generation 1; rank 2 did not
  EXPECT_EQ(m.regroup(hb, 2s, {2, 3}), (std::vector<int>{0, 3}));
  EXPECT_EQ(m.generation(), 1);
}

TEST(Membership, LateRankIsExcludedWithAClearError) {
  testing::TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  // Rank 1 never joins and is dead by notice: rank 0 decides [0]; a later regroup of rank 1
  // finds itself excluded.
  Heartbeat hb0(store, 0, {0, 1}, {.interval = 20ms, .timeout = 5s});
  store->set(dead_key(1), "exit status 1");
  Membership m0(store, 0, {0, 1});
  EXPECT_EQ(m0.regroup(hb0, 2s), std::vector<int>{0});
  Heartbeat hb1(store, 1, {0, 1}, {.interval = 20ms, .timeout = 5s});
  Membership m1(store, 1, {0, 1});
  EXPECT_TRUE(m1.regroup_started());
  try {
    m1.regroup(hb1, 2s);
    FAIL() << "excluded rank joined";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 was excluded from generation 1"), std::string::npos) << e.what();
  }
}

// A store that can be cut off like a partitioned link, counting the operations tried on it.
class CuttableStore : public Store {
 public:
  explicit CuttableStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  std::atomic<bool> cut{false};
  std::atomic<int> tried{0};

  void set(const std::string& k, const std::string& v) override { reach(); inner_->set(k, v); }
  std::optional<std::string> try_get(const std::string& k) override { reach(); return inner_->try_get(k); }
  int64_t add(const std::string& k, int64_t d) override { reach(); return inner_->add(k, d); }
  void erase(const std::string& k) override { reach(); inner_->erase(k); }
  std::string describe() const override { return "cuttable " + inner_->describe(); }

 private:
  void reach() {
    ++tried;
    HSPMD_CHECK(!cut) << "store unreachable";
  }
  std::shared_ptr<Store> inner_;
};

// Fencing: a rank that cannot beat for the timeout declares itself cut off, once, and never
// touches the store again, even when the store comes back.
TEST(Heartbeat, RankCutOffFromTheStoreFencesItself) {
  testing::TempDir dir;
  auto store = std::make_shared<CuttableStore>(std::make_shared<FileStore>(dir.path()));
  std::atomic<int> calls{0};
  std::string why;
  std::mutex why_mutex;
  HeartbeatOptions options{.interval = 50ms, .timeout = 1s};
  options.on_cut_off = [&](const std::string& w) {
    std::lock_guard<std::mutex> lock(why_mutex);
    why = w;
    ++calls;
  };
  Heartbeat hb(store, 0, {0, 1}, options);
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(hb.cut_off());
  store->cut = true;
  const auto cut = Clock::now();
  while (!hb.cut_off() && Clock::now() - cut < 20s) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(hb.cut_off());
  EXPECT_GE(Clock::now() - cut, 500ms) << "declared itself cut off well before the timeout";
  std::this_thread::sleep_for(100ms);  // on_cut_off runs right after the flag is set
  store->cut = false;
  const int tried = store->tried;
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(store->tried, tried) << "a fenced rank touched the store again";
  EXPECT_EQ(calls, 1);
  std::lock_guard<std::mutex> lock(why_mutex);
  EXPECT_NE(why.find("cut off from the run"), std::string::npos) << why;
  EXPECT_NE(why.find("store unreachable"), std::string::npos) << why;
}

// The cut-off is decided when the timeout passes, not when a hanging store call gives up: the beat
// thread is stuck in a call the whole time, and after the call returns no other is started.
TEST(Heartbeat, CutOffIsDecidedWhileAStoreCallIsBlocked) {
  testing::TempDir dir;
  auto store = std::make_shared<testing::BlockingStore>(std::make_shared<FileStore>(dir.path()));
  std::atomic<int> hanging_at_decision{-1};
  HeartbeatOptions options{.interval = 50ms, .timeout = 1s};
  options.on_cut_off = [&](const std::string&) { hanging_at_decision = store->hanging.load(); };
  Heartbeat hb(store, 0, {0, 1}, options);
  const testing::ReleaseOnExit release{*store};  // the Heartbeat's destructor joins its threads
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(hb.cut_off());
  store->block();
  const auto blocked = Clock::now();
  while (!hb.cut_off() && Clock::now() - blocked < 20s) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(hb.cut_off()) << "no cut-off while the store call hangs";
  EXPECT_GE(Clock::now() - blocked, 500ms) << "declared itself cut off well before the timeout";
  while (hanging_at_decision < 0 && Clock::now() - blocked < 20s) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(hanging_at_decision, 1) << "the decision did not come while the beat thread's call hung";
  const int started = store->started;
  store->release();
  std::this_thread::sleep_for(300ms);  // six beat intervals
  EXPECT_EQ(store->started, started) << "a store call started after the cut-off";
}

}  // namespace
}  // namespace hspmd::comm
