// A store whose calls hang while it is blocked, like Redis calls on a partitioned link waiting for
// their I/O bound. It counts the calls started and those hanging now.
//
//   auto store = std::make_shared<BlockingStore>(std::make_shared<FileStore>(dir.path()));
//   store->block();     // calls from now on hang...
//   store->release();   // ...until this
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "hspmd/comm/store.h"

namespace hspmd::comm::testing {

class BlockingStore : public Store {
 public:
  explicit BlockingStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  std::atomic<int> started{0};
  std::atomic<int> hanging{0};

  void block();
  void release();
  void set(const std::string& k, const std::string& v) override;
  std::optional<std::string> try_get(const std::string& k) override;
  int64_t add(const std::string& k, int64_t d) override;
  void erase(const std::string& k) override;
  std::string describe() const override { return "blocking " + inner_->describe(); }

 private:
  void pass();  // waits while blocked
  std::shared_ptr<Store> inner_;
  std::mutex mutex_;
  std::condition_variable released_;
  bool blocked_ = false;
};

// Releases the store however a test ends, so that what uses it can join its threads.
struct ReleaseOnExit {
  BlockingStore& store;
  ~ReleaseOnExit() { store.release(); }
};

}  // namespace hspmd::comm::testing
