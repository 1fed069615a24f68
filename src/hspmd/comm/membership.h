// Membership: the ranks of the current generation, and the agreement on the next one after a
// failure. Every survivor calls regroup(); all of them return the same member list for
// generation G + 1 (or an Error), after which each rebuilds its groups with
// GroupCache::reset(G + 1) and continues without restarting.
//
// Protocol, under "gen<G+1>/" in the run's store:
//   1. each survivor sets "join/<rank>";
//   2. the first to increment "proposer" (add() returns 1) decides: it waits until every old
//      member has joined or is dead by its Heartbeat (missed beats or a launcher's death
//      notice), bounded by the timeout, then writes "members" = the joined ranks;
//   3. everyone waits for "members"; a rank not listed gets an Error (it was presumed dead).
// A proposer that dies before writing makes the others time out with an Error.
//
//   Membership m(run_store, rank, {0, 1, 2, 3});
//   try { comm->allreduce(...).wait(); }
//   catch (const Error&) { auto alive = m.regroup(heartbeat, 10s); groups.reset(m.generation()); }
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hspmd/comm/heartbeat.h"
#include "hspmd/comm/store.h"

namespace hspmd::comm {

class Membership {
 public:
  Membership(std::shared_ptr<Store> store, int rank, std::vector<int> members, int generation = 0);

  int generation() const { return generation_; }
  const std::vector<int>& members() const { return members_; }

  // True once some survivor has started the next generation's agreement: a rank that saw no
  // error itself (e.g. it was computing) polls this to join in.
  bool regroup_started() const;
  // Agrees on the next generation's members with the other survivors (see above) and moves to
  // it. Throws Error when this rank was excluded or no decision appeared within timeout.
  // `candidates`: ranks outside the generation (restarted workers) that become members when they
  // have set their join key by the time the decision is made.
  const std::vector<int>& regroup(const Heartbeat& heartbeat, Millis timeout, const std::vector<int>& candidates = {});

 private:
  std::string next_key(const std::string& key) const;

  std::shared_ptr<Store> store_;
  int rank_;
  std::vector<int> members_;
  int generation_;
};

}  // namespace hspmd::comm
