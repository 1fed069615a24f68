// File store and prefix store: values, atomic add across threads, waits that time out with an
// error naming the key, URL parsing. (The Redis store is exercised by redis_dist_test.cc against
// a real redis-server.)
#include <gtest/gtest.h>

#include <thread>

#include "comm/comm_testlib.h"
#include "hspmd/comm/file_store.h"
#include "hspmd/comm/prefix_store.h"
#include "hspmd/core/error.h"

namespace hspmd::comm {
namespace {

using testing::TempDir;

TEST(FileStore, SetGetOverwriteEraseAndBinaryValues) {
  TempDir dir;
  FileStore store(dir.path());
  EXPECT_FALSE(store.try_get("a/b").has_value());
  store.set("a/b", "one");
  EXPECT_EQ(store.get("a/b", Millis(10)), "one");
  store.set("a/b", "two");
  EXPECT_EQ(*store.try_get("a/b"), "two");
  std::string binary("\0\xff\n/..", 6);
  store.set("../weird key%", binary);
  EXPECT_EQ(*store.try_get("../weird key%"), binary);
  EXPECT_FALSE(store.try_get("a%2Fb").has_value()) << "escaped names must not collide with keys";
  store.erase("a/b");
  EXPECT_FALSE(store.check({"a/b"}));
  EXPECT_TRUE(store.check({"../weird key%"}));
}

TEST(FileStore, AddIsAtomicAcrossThreads) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) store->add("counter", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store->add("counter", 0), 200);
  EXPECT_EQ(store->add("counter", -5), 195);
  store->set("text", "x");
  EXPECT_THROW(store->add("text", 1), Error);
}

TEST(FileStore, WaitSeesLateKeysAndTimesOutNamingMissingOnes) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::thread writer([&] {
    std::this_thread::sleep_for(Millis(30));
    store->set("late", "1");
  });
  store->wait({"late"}, Millis(5'000));
  writer.join();
  try {
    store->wait({"late", "never"}, Millis(50));
    FAIL() << "wait for a missing key returned";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("'never'"), std::string::npos) << what;
    EXPECT_EQ(what.find("'late'"), std::string::npos) << what;
    EXPECT_NE(what.find(dir.path()), std::string::npos) << what;
  }
  EXPECT_THROW(store->get("never", Millis(20)), Error);
}

TEST(PrefixStore, NamespacesKeysAndNests) {
  TempDir dir;
  auto base = std::make_shared<FileStore>(dir.path());
  auto run = std::make_shared<PrefixStore>(base, "run/42/");
  PrefixStore group(run, "gen1/group/0,2/");
  group.set("0", "addr");
  EXPECT_EQ(*base->try_get("run/42/gen1/group/0,2/0"), "addr");
  EXPECT_FALSE(run->try_get("0").has_value());
  EXPECT_EQ(group.add("n", 3), 3);
  EXPECT_EQ(*base->try_get("run/42/gen1/group/0,2/n"), "3");
  EXPECT_NE(group.describe().find("gen1/group/0,2/"), std::string::npos);
}

TEST(OpenStore, ParsesUrlsAndRejectsBadOnes) {
  TempDir dir;
  auto a = open_store("file://" + dir.path() + "/x");
  a->set("k", "v");
  EXPECT_EQ(*open_store(dir.path() + "/x")->try_get("k"), "v");
  EXPECT_THROW(open_store("tcp://host:1"), Error);
  EXPECT_THROW(open_store("redis://host:port"), Error);
  EXPECT_THROW(open_store("redis://:6379"), Error);
}

}  // namespace
}  // namespace hspmd::comm
