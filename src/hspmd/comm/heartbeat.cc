#include "hspmd/comm/heartbeat.h"

#include <algorithm>

#include "hspmd/comm/store_values.h"
#include "hspmd/core/error.h"

namespace hspmd::comm {

std::string heartbeat_key(int rank) { return "hb/" + std::to_string(rank); }
std::string dead_key(int rank) { return "dead/" + std::to_string(rank); }
std::string dead_notices_key() { return "dead/notices"; }

void publish_death(Store& store, int rank, const std::string& how) {
  store.set(dead_key(rank), how);
  store.add(dead_notices_key(), 1);
}

Heartbeat::Heartbeat(std::shared_ptr<Store> store, int rank, std::vector<int> peers, HeartbeatOptions options)
    : store_(std::move(store)), rank_(rank), options_(options) {
  HSPMD_CHECK(options_.interval.count() > 0 && options_.timeout > options_.interval)
      << "heartbeat of rank " << rank_ << ": timeout " << options_.timeout.count()
      << " ms must exceed the interval " << options_.interval.count() << " ms";
  auto now = std::chrono::steady_clock::now();
  for (int p : peers) {
    if (p != rank_) peers_[p] = Peer{"", now};
  }
  beat_and_check();  // publish the first beat before anyone can miss it
  thread_ = std::thread([this] { loop(); });
  timer_ = std::thread([this] { watch_own_beats(); });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  timer_.join();
}

std::vector<std::pair<int, std::string>> Heartbeat::launcher_notices() {
  std::vector<std::pair<int, std::string>> noticed;
  for (const auto& [rank, peer] : peers_) {
    if (cut_off()) break;
    if (is_dead(rank)) continue;
    if (auto notice = store_->try_get(dead_key(rank))) {
      noticed.emplace_back(rank, "its launcher reports " + death_notice_text(*notice, dead_key(rank)));
    }
  }
  return noticed;
}

void Heartbeat::beat_and_check() {
  const auto sent = std::chrono::steady_clock::now();
  store_->set(heartbeat_key(rank_), std::to_string(++beats_));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cut_off_) return;  // the timer decided while this beat was under way
    last_beat_ = sent;
  }
  std::vector<std::pair<int, std::string>> newly_dead = launcher_notices();
  auto now = std::chrono::steady_clock::now();
  for (auto& [rank, peer] : peers_) {
    const int r = rank;
    if (cut_off()) return;
    if (is_dead(r) || std::any_of(newly_dead.begin(), newly_dead.end(), [r](const auto& d) { return d.first == r; })) {
      continue;
    }
    auto value = store_->try_get(heartbeat_key(rank));
    if (value && *value != peer.last_value) {
      peer.last_value = *value;
      peer.last_change = now;
    } else if (now - peer.last_change > options_.timeout) {
      newly_dead.emplace_back(rank, "no heartbeat for " + std::to_string(options_.timeout.count()) + " ms");
    }
  }
  declare_dead(newly_dead);
}

void Heartbeat::check_notices() {
  std::optional<std::string> notices = store_->try_get(dead_notices_key());
  if (notices == notices_seen_) return;
  notices_seen_ = notices;
  declare_dead(launcher_notices());
}

void Heartbeat::declare_dead(const std::vector<std::pair<int, std::string>>& newly_dead) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [rank, how] : newly_dead) dead_.insert(rank);
  }
  if (options_.on_death) {
    for (const auto& [rank, how] : newly_dead) options_.on_death(rank, how);
  }
}

void Heartbeat::loop() {
  const Millis poll = std::min(options_.notice_poll, options_.interval);
  auto next_beat = std::chrono::steady_clock::now() + options_.interval;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!cv_.wait_for(lock, poll, [&] { return stopping_ || cut_off_; })) {
    lock.unlock();
    try {
      if (std::chrono::steady_clock::now() >= next_beat) {
        next_beat += options_.interval;
        beat_and_check();
      } else {
        check_notices();
      }
    } catch (const std::exception& e) {
      // A store hiccup: the next beat retries; peers tolerate missed beats up to their timeout,
      // and the timer decides when that has passed.
      note_store_error(e.what());
    }
    lock.lock();
  }
}

void Heartbeat::note_store_error(const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  last_store_error_ = what;
}

void Heartbeat::watch_own_beats() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    const auto deadline = last_beat_ + options_.timeout;
    if (std::chrono::steady_clock::now() < deadline) {
      cv_.wait_until(lock, deadline, [&] { return stopping_; });
      continue;  // the beat may have got through meanwhile: the deadline moved
    }
    cut_off_ = true;
    const auto silent = std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - last_beat_);
    const std::string error =
        last_store_error_.empty() ? "its store calls got no reply" : "last error: " + last_store_error_;
    lock.unlock();
    cv_.notify_all();  // the beat thread starts no store call any more
    if (options_.on_cut_off) {
      options_.on_cut_off("rank " + std::to_string(rank_) + " could not reach the store " + store_->describe() +
                          " for " + std::to_string(silent.count()) + " ms (heartbeat timeout " +
                          std::to_string(options_.timeout.count()) + " ms; " + error +
                          "): cut off from the run, whose other members count it dead from now on");
    }
    return;
  }
}

bool Heartbeat::cut_off() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cut_off_;
}
std::vector<int> Heartbeat::dead() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {dead_.begin(), dead_.end()};
}

bool Heartbeat::is_dead(int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dead_.count(rank) > 0;
}

}  // namespace hspmd::comm
