#include "comm/blocking_store_testlib.h"

namespace hspmd::comm::testing {

void BlockingStore::block() {
  std::lock_guard<std::mutex> lock(mutex_);
  blocked_ = true;
}

void BlockingStore::release() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    blocked_ = false;
  }
  released_.notify_all();
}

void BlockingStore::pass() {
  ++started;
  std::unique_lock<std::mutex> lock(mutex_);
  ++hanging;
  released_.wait(lock, [&] { return !blocked_; });
  --hanging;
}

void BlockingStore::set(const std::string& k, const std::string& v) {
  pass();
  inner_->set(k, v);
}

std::optional<std::string> BlockingStore::try_get(const std::string& k) {
  pass();
  return inner_->try_get(k);
}

int64_t BlockingStore::add(const std::string& k, int64_t d) {
  pass();
  return inner_->add(k, d);
}

void BlockingStore::erase(const std::string& k) {
  pass();
  inner_->erase(k);
}

}  // namespace hspmd::comm::testing
