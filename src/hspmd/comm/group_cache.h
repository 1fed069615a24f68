// GroupCache: the communicators of one rank, keyed by their sorted rank list and a channel name,
// and created on first use. Every member of a group calls get() with the same ranks and channel
// at the same point of its program; the members rendezvous under "gen<G>/group/<ranks>/" (channel
// "") or "gen<G>/group/<ranks>/<channel>/" in the run's store, so ranks outside the group never
// touch (nor wait for) it. After a failure, reset(G + 1) drops every group and later groups
// rendezvous under the new generation's keys.
//
//   GroupCache groups(run_store, /*global_rank=*/2, gloo_backend({.timeout = 30s}));
//   auto tp = groups.get({2, 3});        // connects on first use, cached afterwards
//   tp->allreduce({.data = CommBuffer::of(x)}).wait();
//   auto fwd = groups.get({2, 3}, "F");  // same ranks, another communicator (own worker thread)
//   groups.reset(1);                       // new generation after a membership change
//
// Channels exist because a communicator runs its operations in submission order: a send whose
// receiver has not posted yet holds up everything queued behind it. Traffic that must not wait
// for other traffic (forward activations vs backward gradients of a pipeline) takes its own
// channel. Connecting happens outside the cache's lock, so threads of one rank may connect
// different groups or channels at the same time.
//
// One GroupCache belongs to one rank (several ranks in one process use one cache each).
#pragma once

#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "hspmd/comm/communicator.h"
#include "hspmd/comm/store.h"

namespace hspmd::comm {

// Creates the communicator of `ranks` for `global_rank`, rendezvousing through `store` (already
// namespaced for this group and generation).
using Backend = std::function<std::shared_ptr<Communicator>(Store& store, const std::vector<int>& ranks,
                                                            int global_rank, int generation)>;

struct GlooBackendOptions {
  // Bound on connecting and on every operation; a dead or stuck peer surfaces as an Error then.
  Millis timeout{30'000};
  // Address of this host that peers can reach ("127.0.0.1" when the run is on one host).
  std::string host = "127.0.0.1";
};

// Gloo TCP communicators sharing one device (one transport thread) per backend instance.
Backend gloo_backend(const GlooBackendOptions& options = {});

class GroupCache {
 public:
  // A group of one member is served without the store or the backend (comm/self_communicator.h),
  // so a one-rank run passes neither: GroupCache(nullptr, 0, nullptr).
  GroupCache(std::shared_ptr<Store> store, int global_rank, Backend backend, int generation = 0);
  ~GroupCache();
  GroupCache(const GroupCache&) = delete;
  GroupCache& operator=(const GroupCache&) = delete;

  // The communicator of ranks (any order) on `channel`, connected on first use; this rank must be a
  // member. A channel name is non-empty text without '/' (or "" for the default channel).
  std::shared_ptr<Communicator> get(const std::vector<int>& ranks, const std::string& channel = "");
  // Drops every group; later get() calls rendezvous under generation's keys.
  void reset(int generation);
  // Callable from any thread (a failure detector): aborts every communicator (Communicator::abort)
  // and fails every get() with Error(reason) until reset(). Aborted communicators are kept until
  // the cache goes away, since their worker threads may still be inside an operation.
  void abort(const std::string& reason);
  // The reason given to abort() since the last reset(), or "".
  std::string aborted() const;

  int generation() const;
  int global_rank() const { return global_rank_; }
  size_t cached() const;

 private:
  std::shared_ptr<Store> store_;
  int global_rank_;
  Backend backend_;
  mutable std::mutex mutex_;
  int generation_;
  std::string aborted_;
  std::vector<std::shared_future<std::shared_ptr<Communicator>>> retired_;
  // (ranks, channel) -> communicator; the future is pending while its first get() connects.
  std::map<std::pair<std::vector<int>, std::string>, std::shared_future<std::shared_ptr<Communicator>>> groups_;
};

}  // namespace hspmd::comm
