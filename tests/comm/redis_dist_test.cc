// A real redis-server on a free loopback port: the Redis store's operations, then a run of
// every collective on 3 processes whose rendezvous goes through it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "comm/comm_testlib.h"
#include "hspmd/comm/redis_store.h"
#include "hspmd/core/error.h"
#include "error_of.h"

namespace hspmd::comm {
namespace {

using namespace std::chrono_literals;
using testing::binary_path;
using testing::Subprocess;

std::string find_redis_server() {
  for (const char* dir : {"/usr/bin", "/usr/sbin", "/usr/local/bin"}) {
    std::string path = std::string(dir) + "/redis-server";
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

// A port the kernel just handed out on 127.0.0.1 (free at that moment).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  HSPMD_CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) << "bind";
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

class RedisDist : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string server = find_redis_server();
    if (server.empty()) GTEST_SKIP() << "redis-server is not installed (Debian package redis-server)";
    port_ = free_port();
    std::vector<std::string> args = {server, "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "",
                                     "--appendonly", "no"};
    for (const auto& a : extra_server_args()) args.push_back(a);
    redis_ = std::make_unique<Subprocess>(args);
    ASSERT_TRUE(redis_->wait_for_output("Ready to accept connections", 10s)) << redis_->output();
  }
  void TearDown() override {
    if (redis_) {
      ::kill(redis_->pid(), SIGTERM);
      redis_->finish(10s);
    }
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  virtual std::vector<std::string> extra_server_args() const { return {}; }

  int port_ = 0;
  std::unique_ptr<Subprocess> redis_;
};

TEST_F(RedisDist, StoreOperations) {
  auto store = open_store(url());
  EXPECT_EQ(store->describe(), url());
  EXPECT_FALSE(store->try_get("k").has_value());
  store->set("k", std::string("a\0b", 3));
  EXPECT_EQ(*store->try_get("k"), std::string("a\0b", 3));
  store->set("k", "overwritten");  // Gloo's own RedisStore refuses this (SETNX)
  EXPECT_EQ(store->get("k", 100ms), "overwritten");
  EXPECT_EQ(store->add("n", 5), 5);
  EXPECT_EQ(store->add("n", -2), 3);
  store->erase("k");
  EXPECT_FALSE(store->check({"k"}));
  EXPECT_THROW(store->wait({"never"}, 50ms), Error);
  EXPECT_THROW(open_store("redis://127.0.0.1:" + std::to_string(free_port())), Error);
}

TEST_F(RedisDist, CollectivesRendezvousThroughRedis) {
  Subprocess p({binary_path("hspmd"), "launch", "-n", "3", "--store", url(), "--run-id", "redis-run", "--",
                binary_path("hspmd_comm_worker"), "collectives"});
  ASSERT_EQ(p.finish(120s), 0) << p.output();
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(p.output().find("rank " + std::to_string(r) + " of 3 (hspmd launch): collectives ok"), std::string::npos)
        << p.output();
  }
  // The rendezvous really went through Redis, under the run's namespace.
  auto store = open_store(url());
  EXPECT_TRUE(store->check({"run/redis-run/gen0/group/0,1,2/0"})) << "no group address key in redis";
}

// A server that wants a password (requirepass for the default user, an ACL user "trainer").
class RedisWithPassword : public RedisDist {
 protected:
  std::vector<std::string> extra_server_args() const override {
    return {"--requirepass", "s3cret", "--user", "trainer", "on", ">t-pass", "~*", "&*", "+@all"};
  }
  std::string user_url() const { return "redis://trainer@127.0.0.1:" + std::to_string(port_); }
};

using hspmd::testing::error_of;

TEST_F(RedisWithPassword, RefusesAClientWithoutTheRightPassword) {
  EXPECT_THAT(error_of([&] { open_store(url(), {}); }), ::testing::HasSubstr("refused access: NOAUTH"));
  EXPECT_THAT(error_of([&] { open_store(url(), {.password = "wrong"}); }),
              ::testing::HasSubstr("refused the password of user 'default'"));
  EXPECT_THAT(error_of([&] { open_store(user_url(), {.password = "s3cret"}); }),
              ::testing::HasSubstr("refused the password of user 'trainer'"));
  EXPECT_THAT(error_of([&] { open_store(user_url(), {}); }), ::testing::HasSubstr("but no password is given"));
}

TEST_F(RedisWithPassword, AuthenticatedClientsWork) {
  auto store = open_store(url(), {.password = "s3cret"});
  store->set("k", "v");
  auto as_user = open_store(user_url(), {.password = "t-pass"});
  EXPECT_EQ(*as_user->try_get("k"), "v");
  EXPECT_EQ(as_user->add("n", 2), 2);
  EXPECT_EQ(as_user->describe(), user_url());
}

// The password reaches the workers through the environment, from a file only its owner can read.
TEST_F(RedisWithPassword, LaunchReadsThePasswordFromAFile) {
  const std::string file = ::testing::TempDir() + "/redis-password-" + std::to_string(port_);
  {
    std::ofstream(file) << "s3cret\n";
  }
  ::chmod(file.c_str(), 0644);
  Subprocess refused({binary_path("hspmd"), "launch", "-n", "2", "--store", url(), "--run-id", "pw-run",
                      "--store-password-file", file, "--", "/bin/true"});
  EXPECT_NE(refused.finish(60s), 0);
  EXPECT_THAT(refused.output(), ::testing::HasSubstr("can be read by other users"));
  ::chmod(file.c_str(), 0600);
  Subprocess p({binary_path("hspmd"), "launch", "-n", "2", "--store", url(), "--run-id", "pw-run",
                "--store-password-file", file, "--", binary_path("hspmd_comm_worker"), "collectives"});
  ASSERT_EQ(p.finish(120s), 0) << p.output();
  EXPECT_NE(p.output().find("rank 1 of 2 (hspmd launch): collectives ok"), std::string::npos) << p.output();
  Subprocess no_password({binary_path("hspmd"), "launch", "-n", "1", "--store", url(), "--run-id", "pw-run2", "--",
                          "/bin/true"});
  EXPECT_NE(no_password.finish(60s), 0);
  EXPECT_THAT(no_password.output(), ::testing::HasSubstr("refused access: NOAUTH"));
  std::filesystem::remove(file);
}

// Refused before any connection is tried, so no address outside this host is touched.
TEST(RedisAccess, StoreOnAnotherHostNeedsAPasswordOrInsecure) {
  EXPECT_THAT(error_of([] { open_store("redis://10.1.2.3:6379", {}); }),
              ::testing::HasSubstr("is on another host and has no password"));
  EXPECT_THAT(error_of([] { open_store("redis://u:pw@10.1.2.3:6379", {.password = "x"}); }),
              ::testing::HasSubstr("must be a user name alone"));
  EXPECT_TRUE(is_loopback_host("127.0.0.1") && is_loopback_host("localhost") && is_loopback_host("::1"));
  EXPECT_FALSE(is_loopback_host("10.0.0.1") || is_loopback_host("127x"));
}

}  // namespace
}  // namespace hspmd::comm
