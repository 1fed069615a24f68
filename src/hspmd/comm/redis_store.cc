#include "hspmd/comm/redis_store.h"

#include <hiredis/hiredis.h>

#include "hspmd/core/error.h"

namespace hspmd::comm {

struct RedisStore::Context {
  redisContext* c = nullptr;
  ~Context() {
    if (c != nullptr) redisFree(c);
  }
};

namespace {

// Owns one hiredis reply.
struct Reply {
  redisReply* reply = nullptr;
  ~Reply() {
    if (reply != nullptr) freeReplyObject(reply);
  }
};

timeval to_timeval(Millis t) {
  return timeval{static_cast<time_t>(t.count() / 1000), static_cast<suseconds_t>((t.count() % 1000) * 1000)};
}

std::string reply_text(const redisReply* r) { return std::string(r->str, r->len); }

}  // namespace

RedisStore::RedisStore(RedisAddress address, Millis io_timeout)
    : address_(std::move(address)), io_timeout_(io_timeout) {
  std::lock_guard<std::mutex> lock(mutex_);
  connection();  // a wrong address or password surfaces here, before anyone relies on the store
}

RedisStore::~RedisStore() = default;

std::string RedisStore::describe() const {
  return "redis://" + (address_.user.empty() ? "" : address_.user + "@") + address_.host + ":" +
         std::to_string(address_.port);
}

redisContext* RedisStore::connection() {
  if (context_ && context_->c->err == 0) return context_->c;
  context_.reset();
  auto fresh = std::make_unique<Context>();
  fresh->c = redisConnectWithTimeout(address_.host.c_str(), address_.port, to_timeval(io_timeout_));
  HSPMD_CHECK(fresh->c != nullptr) << "cannot connect to redis store " << describe() << ": out of memory";
  HSPMD_CHECK(fresh->c->err == 0) << "cannot connect to redis store " << describe() << ": " << fresh->c->errstr;
  HSPMD_CHECK(redisSetTimeout(fresh->c, to_timeval(io_timeout_)) == REDIS_OK)
      << "redis store " << describe() << ": cannot set the I/O timeout: " << fresh->c->errstr;
  redisEnableKeepAlive(fresh->c);
  if (!address_.password.empty()) {
    Reply r;
    if (address_.user.empty()) {
      r.reply = static_cast<redisReply*>(redisCommand(fresh->c, "AUTH %b", address_.password.data(),
                                                      address_.password.size()));
    } else {
      r.reply = static_cast<redisReply*>(redisCommand(fresh->c, "AUTH %b %b", address_.user.data(),
                                                      address_.user.size(), address_.password.data(),
                                                      address_.password.size()));
    }
    HSPMD_CHECK(r.reply != nullptr) << "redis store " << describe() << ": AUTH failed: " << fresh->c->errstr;
    HSPMD_CHECK(r.reply->type != REDIS_REPLY_ERROR)
        << "redis store " << describe() << " refused the password of user '"
        << (address_.user.empty() ? "default" : address_.user) << "': " << reply_text(r.reply);
  }
  // Without a password, a server that wants one answers NOAUTH only now: say so here, once.
  Reply ping{static_cast<redisReply*>(redisCommand(fresh->c, "PING"))};
  HSPMD_CHECK(ping.reply != nullptr) << "redis store " << describe() << ": PING failed: " << fresh->c->errstr;
  HSPMD_CHECK(ping.reply->type != REDIS_REPLY_ERROR)
      << "redis store " << describe() << " refused access: " << reply_text(ping.reply)
      << (address_.password.empty() ? " (give its password in HSPMD_STORE_PASSWORD or --store-password-file)" : "");
  context_ = std::move(fresh);
  return context_->c;
}

// Runs one command; `retry`: on an I/O failure, once more on a fresh connection.
#define HSPMD_REDIS_COMMAND(reply_var, what, retry, ...)                                                   \
  Reply reply_var;                                                                                         \
  for (int attempt = 0;; ++attempt) {                                                                      \
    redisContext* c = connection();                                                                        \
    reply_var.reply = static_cast<redisReply*>(redisCommand(c, __VA_ARGS__));                             \
    if (reply_var.reply != nullptr || !(retry) || attempt == 1) break;                                     \
  }                                                                                                        \
  HSPMD_CHECK(reply_var.reply != nullptr && reply_var.reply->type != REDIS_REPLY_ERROR)                    \
      << "redis store " << describe() << ": " << what << " failed: "                                       \
      << (reply_var.reply ? reply_text(reply_var.reply) : std::string(context_->c->errstr))

void RedisStore::set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mutex_);
  HSPMD_REDIS_COMMAND(r, "SET '" << key << "'", true, "SET %b %b", key.data(), key.size(), value.data(),
                      value.size());
}

std::optional<std::string> RedisStore::try_get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  HSPMD_REDIS_COMMAND(r, "GET '" << key << "'", true, "GET %b", key.data(), key.size());
  if (r.reply->type == REDIS_REPLY_NIL) return std::nullopt;
  HSPMD_CHECK(r.reply->type == REDIS_REPLY_STRING)
      << "redis store " << describe() << ": key '" << key << "' is not a string";
  return reply_text(r.reply);
}

int64_t RedisStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(mutex_);
  HSPMD_REDIS_COMMAND(r, "INCRBY '" << key << "'", false, "INCRBY %b %lld", key.data(), key.size(),
                      static_cast<long long>(delta));
  HSPMD_CHECK(r.reply->type == REDIS_REPLY_INTEGER)
      << "redis store " << describe() << ": INCRBY '" << key << "' did not answer an integer";
  return r.reply->integer;
}

void RedisStore::erase(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  HSPMD_REDIS_COMMAND(r, "DEL '" << key << "'", true, "DEL %b", key.data(), key.size());
}

#undef HSPMD_REDIS_COMMAND

}  // namespace hspmd::comm
