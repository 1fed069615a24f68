// Heartbeat: failure detection through the store. A thread publishes this rank's beat counter
// ("hb/<rank>") every interval and watches its peers: a peer is dead once its counter has not
// changed for `timeout` (measured on the local clock, so hosts need no synchronized clocks), or
// at once when its launcher published a death notice ("dead/<rank>", launcher.h). Notices are
// announced by a counter ("dead/notices"), read every `notice_poll`: one store read, so a notice
// reaches every peer within tens of milliseconds even on a large cluster, while beats stay sparse.
//
//   Heartbeat hb(run_store, /*rank=*/2, /*peers=*/{0, 1, 3}, {.interval = 200ms, .timeout = 2s});
//   ...
//   if (!hb.dead().empty()) membership.regroup(hb, 10s);   // membership.h
//
// Death is final: a rank once declared dead stays dead for this Heartbeat. A rank that cannot
// beat for `timeout` itself knows its peers count it dead: it declares itself cut off (fencing).
// A timer thread makes that decision at the timeout itself, even while a store call of the beat
// thread is still blocked (a partitioned link holds a Redis call for its I/O bound): counted from
// when the last beat the store took was sent, so this rank stops no later than its peers, who
// count from when they saw that beat.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "hspmd/comm/store.h"

namespace hspmd::comm {

struct HeartbeatOptions {
  Millis interval{500};   // between beats (and between checks of the peers)
  Millis notice_poll{20};  // between reads of the death-notice counter (at most `interval`)
  Millis timeout{5'000};  // no new beat for this long = dead; the detection bound (<= 10 s)
  // Called on the heartbeat thread once per peer declared dead (e.g. to abort communication that
  // waits on it); `how` is the launcher's notice or "missed heartbeats for N ms".
  std::function<void(int rank, const std::string& how)> on_death{};
  // Called once, on the timer thread, when this rank could not publish a beat for `timeout` (the
  // store is unreachable: this host is cut off). Its peers declare it dead from then on, so it must
  // stop and never write to the run again; the Heartbeat itself starts no store call any more (one
  // already under way when the timeout passed may still finish).
  std::function<void(const std::string& why)> on_cut_off{};
};

// Store keys of the failure signals.
std::string heartbeat_key(int rank);  // "hb/<rank>"
std::string dead_key(int rank);       // "dead/<rank>": a death notice, value = how it died
std::string dead_notices_key();       // "dead/notices": counts the notices (bumped after each one)
// Publishes a death notice: dead/<rank>, then the counter that makes peers look at once.
void publish_death(Store& store, int rank, const std::string& how);

class Heartbeat {
 public:
  Heartbeat(std::shared_ptr<Store> store, int rank, std::vector<int> peers, HeartbeatOptions options = {});
  ~Heartbeat();  // stops beating (peers will declare this rank dead after their timeout)
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Watched peers declared dead so far, sorted.
  std::vector<int> dead() const;
  bool is_dead(int rank) const;
  // True once this rank has been cut off from the store for `timeout` (see on_cut_off).
  bool cut_off() const;
  const HeartbeatOptions& options() const { return options_; }

 private:
  void beat_and_check();
  // Live peers with a launcher's death notice, and how they died.
  std::vector<std::pair<int, std::string>> launcher_notices();
  // Checks the peers' death notices when the notice counter moved since the last look.
  void check_notices();
  // Records the peers as dead, then calls on_death for each (outside the lock).
  void declare_dead(const std::vector<std::pair<int, std::string>>& newly_dead);
  void loop();
  // The timer thread: declares this rank cut off once no beat got through for `timeout`.
  void watch_own_beats();
  // Records a store error of the beat thread, for the cut-off message.
  void note_store_error(const std::string& what);

  std::shared_ptr<Store> store_;
  int rank_;
  HeartbeatOptions options_;
  int64_t beats_ = 0;
  std::optional<std::string> notices_seen_;  // the counter's value at the last full check
  struct Peer {
    std::string last_value;
    std::chrono::steady_clock::time_point last_change;
  };
  std::map<int, Peer> peers_;  // heartbeat thread only (after construction)
  mutable std::mutex mutex_;
  // When the last beat the store took was sent (the cut-off timer counts from it) and the beat
  // thread's last store error; both under mutex_.
  std::chrono::steady_clock::time_point last_beat_;
  std::string last_store_error_;
  std::set<int> dead_;
  bool cut_off_ = false;
  bool stopping_ = false;
  std::condition_variable cv_;
  std::thread thread_;
  std::thread timer_;
};

}  // namespace hspmd::comm
