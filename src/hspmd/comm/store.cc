#include "hspmd/comm/store.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
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

StoreAccess StoreAccess::from_environment() {
  StoreAccess access;
  if (const char* password = std::getenv("HSPMD_STORE_PASSWORD")) access.password = password;
  if (const char* insecure = std::getenv("HSPMD_INSECURE_STORE")) access.insecure = std::string(insecure) == "1";
  return access;
}

std::string read_password_file(const std::string& path) {
  struct stat st {};
  HSPMD_CHECK(::stat(path.c_str(), &st) == 0) << "store password file " << path << ": " << std::strerror(errno);
  HSPMD_CHECK((st.st_mode & 077) == 0) << "store password file " << path << " can be read by other users (mode "
                                       << std::oct << (st.st_mode & 0777) << "): chmod 600 it";
  std::ifstream in(path);
  std::string password;
  std::getline(in, password);
  HSPMD_CHECK(!in.bad()) << "store password file " << path << ": cannot read it";
  if (!password.empty() && password.back() == '\r') password.pop_back();
  HSPMD_CHECK(!password.empty()) << "store password file " << path << " is empty (the password is its first line)";
  return password;
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

std::shared_ptr<Store> open_store(const std::string& url, const StoreAccess& access) {
  const std::string file_scheme = "file://";
  const std::string redis_scheme = "redis://";
  if (url.rfind(file_scheme, 0) == 0) return std::make_shared<FileStore>(url.substr(file_scheme.size()));
  if (!url.empty() && url[0] == '/') return std::make_shared<FileStore>(url);
  if (url.rfind(redis_scheme, 0) == 0) {
    RedisAddress address;
    std::string rest = url.substr(redis_scheme.size());
    if (auto at = rest.rfind('@'); at != std::string::npos) {
      address.user = rest.substr(0, at);
      rest = rest.substr(at + 1);
      HSPMD_CHECK(!address.user.empty() && address.user.find(':') == std::string::npos)
          << "store URL '" << url << "': the part before '@' must be a user name alone (the password comes from "
          << "HSPMD_STORE_PASSWORD or --store-password-file, never from the command line)";
    }
    auto colon = rest.rfind(':');
    address.host = rest;
    if (colon != std::string::npos) {
      address.host = rest.substr(0, colon);
      std::string port_text = rest.substr(colon + 1);
      HSPMD_CHECK(!port_text.empty() && port_text.size() <= 5 &&
                  port_text.find_first_not_of("0123456789") == std::string::npos && std::stoi(port_text) <= 65535)
          << "store URL '" << url << "': port '" << port_text << "' is not a port number";
      address.port = std::stoi(port_text);
    }
    HSPMD_CHECK(!address.host.empty()) << "store URL '" << url << "' has no host";
    HSPMD_CHECK(address.user.empty() || !access.password.empty())
        << "store URL '" << url << "' names user '" << address.user
        << "' but no password is given (HSPMD_STORE_PASSWORD or --store-password-file)";
    address.password = access.password;
    HSPMD_CHECK(!address.password.empty() || access.insecure || is_loopback_host(address.host))
        << "store " << url << " is on another host and has no password: anyone who reaches it could declare ranks "
        << "dead or publish the plan every worker adopts. Give the Redis password (requirepass or an ACL user) in "
        << "HSPMD_STORE_PASSWORD or --store-password-file, or accept the risk with --insecure-store";
    return std::make_shared<RedisStore>(std::move(address));
  }
  HSPMD_THROW() << "store URL '" << url
                << "' is neither file:///dir, /dir nor redis://[user@]host:port";
}

}  // namespace hspmd::comm
