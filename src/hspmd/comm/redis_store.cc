#include "hspmd/comm/redis_store.h"

#define HIREDIS_NESTED_INCLUDE 1
#include <gloo/rendezvous/redis_store.h>

#include "hspmd/core/error.h"

namespace hspmd::comm {

class RedisStore::Connection : public gloo::rendezvous::RedisStore {
 public:
  using gloo::rendezvous::RedisStore::RedisStore;
  redisContext* context() { return redis_; }
};

namespace {

// Owns one hiredis reply.
struct Reply {
  redisReply* reply;
  ~Reply() {
    if (reply != nullptr) freeReplyObject(reply);
  }
};

}  // namespace

RedisStore::RedisStore(std::string host, int port) : host_(std::move(host)), port_(port) {
  try {
    connection_ = std::make_unique<Connection>(host_, port_);
  } catch (const std::exception& e) {
    HSPMD_THROW() << "cannot connect to redis store " << describe() << ": " << e.what();
  }
}

RedisStore::~RedisStore() = default;

#define HSPMD_REDIS_COMMAND(reply_var, what, ...)                                                      \
  Reply reply_var{static_cast<redisReply*>(redisCommand(connection_->context(), __VA_ARGS__))};       \
  HSPMD_CHECK(reply_var.reply != nullptr && reply_var.reply->type != REDIS_REPLY_ERROR)               \
      << "redis store " << describe() << ": " << what << " failed: "                                  \
      << (reply_var.reply ? std::string(reply_var.reply->str, reply_var.reply->len)                   \
                          : std::string(connection_->context()->errstr))

void RedisStore::set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mutex_);
  HSPMD_REDIS_COMMAND(r, "SET '" << key << "'", "SET %b %b", key.data(), key.size(), value.data(), value.size());
}

std::optional<std::string> RedisStore::try_get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  HSPMD_REDIS_COMMAND(r, "GET '" << key << "'", "GET %b", key.data(), key.size());
  if (r.reply->type == REDIS_REPLY_NIL) return std::nullopt;
  HSPMD_CHECK(r.reply->type == REDIS_REPLY_STRING)
      << "redis store " << describe() << ": key '" << key << "' is not a string";
  return std::string(r.reply->str, r.reply->len);
}

int64_t RedisStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(mutex_);
  HSPMD_REDIS_COMMAND(r, "INCRBY '" << key << "'", "INCRBY %b %lld", key.data(), key.size(),
                      static_cast<long long>(delta));
  return r.reply->integer;
}

void RedisStore::erase(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  HSPMD_REDIS_COMMAND(r, "DEL '" << key << "'", "DEL %b", key.data(), key.size());
}

#undef HSPMD_REDIS_COMMAND

}  // namespace hspmd::comm
