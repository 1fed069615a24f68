// RedisStore: a Store on a Redis server (redis://host:port), for runs that span several hosts.
// The connection is Gloo's (gloo::rendezvous::RedisStore, built with GLOO_USE_REDIS); this class
// adds what rendezvous beyond Gloo needs: overwriting set (Gloo's uses SETNX), INCRBY for add and
// DEL, all serialized by one mutex because a hiredis context is not thread safe.
//
//   RedisStore store("127.0.0.1", 6379);   // throws Error naming host:port when unreachable
//   store.add("gen1/proposer", 1);           // INCRBY
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "hspmd/comm/store.h"

namespace hspmd::comm {

class RedisStore : public Store {
 public:
  RedisStore(std::string host, int port);
  ~RedisStore() override;

  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> try_get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void erase(const std::string& key) override;
  std::string describe() const override { return "redis://" + host_ + ":" + std::to_string(port_); }

 private:
  class Connection;  // Gloo's RedisStore, exposing its hiredis context

  std::string host_;
  int port_;
  std::mutex mutex_;
  std::unique_ptr<Connection> connection_;
};

}  // namespace hspmd::comm
