// RedisStore: a Store on a Redis server (redis://[user@]host:port), for runs that span several
// hosts. Talks to the server through hiredis directly: overwriting SET, INCRBY for add, DEL, all
// serialized by one mutex because a hiredis context is not thread safe.
//
//   RedisStore store({.host = "10.0.0.1", .port = 6379, .user = "hspmd", .password = secret});
//   store.add("gen1/proposer", 1);           // INCRBY
//
// Access: with a password the connection authenticates first (AUTH user password, Redis 6 ACLs;
// AUTH password for the default user), and a refused password is an Error naming the server and
// the user, before any key is touched. TLS is not offered: Debian's hiredis (0.14) has no TLS.
//
// Every command is bounded by `io_timeout` (a partitioned link must not hang the heartbeat or the
// launcher for TCP's retransmission timeout, many minutes). A command that fails on I/O drops the
// connection; the next one connects again. Idempotent commands (GET, SET, DEL) are retried once on
// a fresh connection; INCRBY never is (it might have been applied before the reply was lost).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "hspmd/comm/store.h"

struct redisContext;

namespace hspmd::comm {

struct RedisAddress {
  std::string host;
  int port = 6379;
  std::string user;      // empty: Redis's default user
  std::string password;  // empty: no AUTH
};

class RedisStore : public Store {
 public:
  // Bound on connecting and on every command (see above).
  static constexpr Millis kIoTimeout{1'000};

  explicit RedisStore(RedisAddress address, Millis io_timeout = kIoTimeout);
  ~RedisStore() override;

  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> try_get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void erase(const std::string& key) override;
  std::string describe() const override;

 private:
  struct Context;  // owns one redisContext
  // Connects (and authenticates) when there is no usable connection. Caller holds mutex_.
  redisContext* connection();

  RedisAddress address_;
  Millis io_timeout_;
  std::mutex mutex_;
  std::unique_ptr<Context> context_;
};

}  // namespace hspmd::comm
