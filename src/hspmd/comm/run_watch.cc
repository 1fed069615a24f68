#include "hspmd/comm/run_watch.h"

#include <condition_variable>
#include <mutex>

#include "hspmd/comm/heartbeat.h"
#include "hspmd/comm/store_values.h"
#include "hspmd/core/error.h"

namespace hspmd::comm {

struct RunWatch::Shared {
  std::shared_ptr<Store> store;
  std::vector<int> ranks;
  Millis period;
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  bool in_store_call = false;
  int generation = 0;  // the newest generation read
  std::vector<std::pair<int, std::string>> deaths;  // to publish
  Reading reading;

  void loop();
  bool stopped() {
    std::lock_guard<std::mutex> lock(mutex);
    return stopping;
  }
  // One reading; every store call happens outside the mutex, and none starts once stopped.
  void read(std::vector<std::pair<int, std::string>> deaths_to_publish);
};

void RunWatch::Shared::loop() {
  std::unique_lock<std::mutex> lock(mutex);
  while (true) {
    // A death to publish does not wait for the period: the survivors act on it at once.
    wake.wait_for(lock, period, [&] { return stopping || !deaths.empty(); });
    if (stopping) return;
    std::vector<std::pair<int, std::string>> to_publish = std::move(deaths);
    deaths.clear();
    in_store_call = true;
    lock.unlock();
    read(std::move(to_publish));
    lock.lock();
    in_store_call = false;
  }
}

void RunWatch::Shared::read(std::vector<std::pair<int, std::string>> to_publish) {
  const auto begun = Clock::now();
  std::vector<std::string> notes;
  for (const auto& [rank, how] : to_publish) {
    if (stopped()) return;
    try {
      comm::publish_death(*store, rank, how);
    } catch (const std::exception& e) {
      notes.push_back("cannot publish the death of rank " + std::to_string(rank) + " in the store: " + e.what());
    }
  }
  std::vector<std::pair<int, std::vector<int>>> agreed;
  std::map<int, std::optional<std::string>> beats;
  std::string error;
  try {
    int g = generation;  // only this thread changes it
    while (!stopped()) {
      const std::optional<std::string> text = store->try_get("gen" + std::to_string(g + 1) + "/members");
      if (!text) break;
      ++g;
      agreed.emplace_back(g, parse_rank_list(*text, "gen" + std::to_string(g) + "/members"));
    }
    for (int rank : ranks) {
      if (stopped()) return;
      beats[rank] = store->try_get(heartbeat_key(rank));
    }
  } catch (const Error& e) {
    error = e.what();
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (stopping) return;
  reading.notes.insert(reading.notes.end(), notes.begin(), notes.end());
  reading.error = error;
  if (!error.empty()) return;  // the generations are read again next time
  if (!agreed.empty()) generation = agreed.back().first;
  reading.generations.insert(reading.generations.end(), agreed.begin(), agreed.end());
  reading.beats = std::move(beats);
  reading.read_at = begun;
}

RunWatch::RunWatch(std::shared_ptr<Store> run_store, std::vector<int> ranks, int generation, Millis period)
    : shared_(std::make_shared<Shared>()) {
  shared_->store = std::move(run_store);
  shared_->ranks = std::move(ranks);
  shared_->period = period;
  shared_->generation = generation;
  shared_->reading.read_at = Clock::now();
  thread_ = std::thread([shared = shared_] { shared->loop(); });
}

RunWatch::~RunWatch() {
  bool hanging = false;
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->stopping = true;
    hanging = shared_->in_store_call;
  }
  shared_->wake.notify_all();
  if (hanging) {
    thread_.detach();  // it holds the shared state and the store; it ends after its call
  } else {
    thread_.join();
  }
}

RunWatch::Reading RunWatch::take() {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  Reading r = shared_->reading;
  shared_->reading.generations.clear();
  shared_->reading.notes.clear();
  return r;
}

void RunWatch::publish_death(int rank, const std::string& how) {
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->deaths.emplace_back(rank, how);
  }
  shared_->wake.notify_all();
}

}  // namespace hspmd::comm
