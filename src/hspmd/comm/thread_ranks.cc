#include "hspmd/comm/thread_ranks.h"

#include <stdlib.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <latch>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hspmd/comm/file_store.h"
#include "hspmd/core/error.h"

namespace hspmd::comm {

namespace {

// A fresh directory (unique per call, also across processes), removed with its contents on exit.
class StoreDir {
 public:
  StoreDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "hspmd-ranks-XXXXXX").string();
    HSPMD_CHECK(::mkdtemp(pattern.data()) != nullptr) << "run_thread_ranks: cannot create store directory " << pattern;
    path_ = pattern;
  }
  ~StoreDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  StoreDir(const StoreDir&) = delete;
  StoreDir& operator=(const StoreDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

void run_thread_ranks(int world, const std::function<void(int rank, GroupCache& groups)>& body, Millis timeout,
                      const std::function<Backend(int rank)>& backend_of) {
  HSPMD_CHECK(world >= 1) << "run_thread_ranks: world size " << world;
  StoreDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::mutex mutex;
  std::string first_error;
  std::latch all_done(world);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(world));
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<GroupCache> groups;
      try {
        groups = std::make_unique<GroupCache>(store, rank,
                                              backend_of ? backend_of(rank) : gloo_backend({.timeout = timeout}));
        body(rank, *groups);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        if (first_error.empty()) first_error = "rank " + std::to_string(rank) + ": " + e.what();
      }
      // A rank's communicators close only once every body has returned: a rank that is done must
      // not tear down connections a slower peer is still finishing a transfer on.
      all_done.arrive_and_wait();
    });
  }
  for (std::thread& t : threads) t.join();
  HSPMD_CHECK(first_error.empty()) << first_error;
}

}  // namespace hspmd::comm
