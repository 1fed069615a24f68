// Store: the key-value rendezvous every process of a run talks through (gloo rendezvous/store.h,
// c10d Store.hpp). Groups exchange their TCP addresses here, heartbeats and membership decisions
// live here too.
//
//   std::shared_ptr<Store> store = open_store("file:///tmp/hspmd-run42");   // or redis://[user@]host:port
//   auto run = std::make_shared<PrefixStore>(store, "run42/");              // namespace by run id
//   run->set("hello", "world");
//   run->get("hello", std::chrono::seconds(5));    // "world"; throws Error after 5 s if absent
//   run->add("counter", 1);                        // atomic, returns the new value
//   run->wait({"a", "b"}, std::chrono::seconds(2)); // throws Error naming the missing keys
//
// Values are byte strings (std::string may hold any bytes). Every implementation is safe to use
// from several threads at once (the heartbeat thread shares the store with collectives).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hspmd::comm {

using Millis = std::chrono::milliseconds;

// Default bound for rendezvous waits: long enough for slow process start-up, short enough that a
// missing peer surfaces as an error instead of a hang.
inline constexpr Millis kDefaultStoreTimeout{60'000};

class Store {
 public:
  virtual ~Store() = default;

  // Sets key to value, overwriting any previous value.
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Value of key, or nullopt when it does not exist (never waits).
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  // Atomically adds delta to the decimal integer stored at key (missing counts as 0) and returns
  // the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Removes key if present.
  virtual void erase(const std::string& key) = 0;
  // Where the store lives, for error messages: "file:///tmp/run", "redis://127.0.0.1:6379".
  virtual std::string describe() const = 0;

  // Value of key; waits up to timeout for it to appear, then throws Error naming the key.
  std::string get(const std::string& key, Millis timeout = kDefaultStoreTimeout);
  // True when every key exists (never waits).
  bool check(const std::vector<std::string>& keys);
  // Waits until every key exists; throws Error naming the still-missing keys after timeout.
  virtual void wait(const std::vector<std::string>& keys, Millis timeout = kDefaultStoreTimeout);
};

// Who may write the run: the secret a Redis store asks for. Never taken from a command line (other
// users of the host can read every process's arguments): from the environment, which `hspmd
// launch --store-password-file` fills for its workers.
struct StoreAccess {
  std::string password;   // HSPMD_STORE_PASSWORD; the user is in the URL (redis://user@host:port)
  bool insecure = false;  // HSPMD_INSECURE_STORE=1: allow a store on another host without password
  static StoreAccess from_environment();
};

// The password in `path`: its first line. Error naming the file when it cannot be read, is empty,
// or can be read by other users (mode & 077, as ssh insists for private keys).
std::string read_password_file(const std::string& path);

// True for names and addresses of this host only: localhost, 127.0.0.0/8, ::1.
bool is_loopback_host(const std::string& host);

// Opens a store from its URL: "file:///abs/dir" or "/abs/dir" (a directory, created if missing;
// one host or a shared file system) or "redis://[user@]host:port" (several hosts). Throws Error
// naming the URL when it is malformed, the server cannot be reached or refuses the password, and
// for a Redis store on another host without a password unless `access.insecure`: anyone who
// reaches such a store could declare ranks dead or publish the plan every survivor adopts.
std::shared_ptr<Store> open_store(const std::string& url,
                                  const StoreAccess& access = StoreAccess::from_environment());

}  // namespace hspmd::comm
