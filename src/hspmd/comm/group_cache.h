// GroupCache: the communicators of one rank, keyed by their sorted rank list and created on
// first use. Every member of a group calls get() with the same ranks at the same point of its
// program; the members rendezvous under "gen<G>/group/<ranks>/" in the run's store, so ranks
// outside the group never touch (nor wait for) it. After a failure, reset(G + 1) drops every
// group and later groups rendezvous under the new generation's keys.
//
//   GroupCache groups(run_store, /*global_rank=*/2, gloo_backend({.timeout = 30s}));
//   auto tp = groups.get({2, 3});        // connects on first use, cached afterwards
//   tp->allreduce({.data = CommBuffer::of(x)}).wait();
//   groups.reset(1);                       // new generation after a membership change
//
// One GroupCache belongs to one rank (several ranks in one process use one cache each).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
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
  GroupCache(std::shared_ptr<Store> store, int global_rank, Backend backend, int generation = 0);

  // The communicator of ranks (any order), connected on first use; this rank must be a member.
  std::shared_ptr<Communicator> get(const std::vector<int>& ranks);
  // Drops every group; later get() calls rendezvous under generation's keys.
  void reset(int generation);

  int generation() const;
  int global_rank() const { return global_rank_; }
  size_t cached() const;

 private:
  std::shared_ptr<Store> store_;
  int global_rank_;
  Backend backend_;
  mutable std::mutex mutex_;
  int generation_;
  std::map<std::vector<int>, std::shared_ptr<Communicator>> groups_;
};

}  // namespace hspmd::comm
