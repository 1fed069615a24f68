// RunWatch: an elastic launcher's view of its run in the store (launcher.h, Fencing), read on a
// thread of its own. A partitioned link holds a store call for the store's I/O bound; the launcher
// never waits on one: it decides from the newest complete reading and from when that reading
// began, so it can declare its host cut off exactly when the heartbeat timeout has passed.
//
//   RunWatch watch(run_store, /*ranks=*/{2, 3}, /*generation=*/0, Millis(100));
//   RunWatch::Reading r = watch.take();          // generations agreed since the last take, beats
//   if (Clock::now() - r.read_at > timeout) ...  // no complete reading for the timeout: cut off
//   watch.publish_death(3, "signal 9 (Killed)"); // written by the watch thread, never blocks
//
// The watch writes nothing but the deaths it is given. Destroying it stops the thread; a store call
// hanging at that moment is not waited for (the thread finishes it alone and then ends without
// starting another), and deaths not yet published are dropped.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "hspmd/comm/store.h"

namespace hspmd::comm {

class RunWatch {
 public:
  using Clock = std::chrono::steady_clock;

  struct Reading {
    // Generations agreed since the previous take(), oldest first: number and members.
    std::vector<std::pair<int, std::vector<int>>> generations;
    std::map<int, std::optional<std::string>> beats;  // hb/<rank> of the watched ranks
    // When the newest complete reading began (the construction time before the first one).
    Clock::time_point read_at;
    std::string error;                 // why the newest reading failed; "" when it succeeded
    std::vector<std::string> notes;    // deaths that could not be published, since the previous take()
  };

  // Watches `ranks` (this host's) and the generations after `generation`, every `period`.
  RunWatch(std::shared_ptr<Store> run_store, std::vector<int> ranks, int generation, Millis period);
  ~RunWatch();
  RunWatch(const RunWatch&) = delete;
  RunWatch& operator=(const RunWatch&) = delete;

  Reading take();
  // Queues a death notice (heartbeat.h: publish_death) for the watch thread.
  void publish_death(int rank, const std::string& how);

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;  // also held by the thread, which may outlive this object
  std::thread thread_;
};

}  // namespace hspmd::comm
