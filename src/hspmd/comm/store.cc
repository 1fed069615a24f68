#include "hspmd/comm/store.h"

#include <thread>

#include "hspmd/comm/file_store.h"
#include "hspmd/comm/redis_store.h"
#include "hspmd/core/error.h"

namespace hspmd::comm {

namespace {

// Polling back-off for waits: starts at 1 ms (rendezvous is latency sensitive) and grows to
// 20 ms so a long wait costs little CPU.
class Backoff {
 public:
  void sleep() {
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(delay_ * 2, Millis(20));
  }

 private:
  Millis delay_{1};
};

}  // namespace

std::string Store::get(const std::string& key, Millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  Backoff backoff;
  while (true) {
    if (auto value = try_get(key)) return *value;
    HSPMD_CHECK(std::chrono::steady_clock::now() < deadline)
        << "store " << describe() << ": key '" << key << "' did not appear within "
        << timeout.count() << " ms";
    backoff.sleep();
  }
}

bool Store::check(const std::vector<std::string>& keys) {
  for (const auto& key : keys) {
    if (!try_get(key)) return false;
  }
  return true;
}

void Store::wait(const std::vector<std::string>& keys, Millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  Backoff backoff;
  while (true) {
    std::string missing;
    for (const auto& key : keys) {
      if (!try_get(key)) {
        if (!missing.empty()) missing += ", ";
        missing += "'" + key + "'";
      }
    }
    if (missing.empty()) return;
    HSPMD_CHECK(std::chrono::steady_clock::now() < deadline)
        << "store " << describe() << ": keys " << missing << " did not appear within "
        << timeout.count() << " ms";
    backoff.sleep();
  }
}

std::shared_ptr<Store> open_store(const std::string& url) {
  const std::string file_scheme = "file://";
  const std::string redis_scheme = "redis://";
  if (url.rfind(file_scheme, 0) == 0) return std::make_shared<FileStore>(url.substr(file_scheme.size()));
  if (!url.empty() && url[0] == '/') return std::make_shared<FileStore>(url);
  if (url.rfind(redis_scheme, 0) == 0) {
    std::string rest = url.substr(redis_scheme.size());
    auto colon = rest.rfind(':');
    int port = 6379;
    std::string host = rest;
    if (colon != std::string::npos) {
      host = rest.substr(0, colon);
      std::string port_text = rest.substr(colon + 1);
      HSPMD_CHECK(!port_text.empty() && port_text.find_first_not_of("0123456789") == std::string::npos)
          << "store URL '" << url << "': port '" << port_text << "' is not a number";
      port = std::stoi(port_text);
    }
    HSPMD_CHECK(!host.empty()) << "store URL '" << url << "' has no host";
    return std::make_shared<RedisStore>(host, port);
  }
  HSPMD_THROW() << "store URL '" << url
                << "' is neither file:///dir, /dir nor redis://host:port";
}

}  // namespace hspmd::comm
