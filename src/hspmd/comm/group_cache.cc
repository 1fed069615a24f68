#include "hspmd/comm/group_cache.h"

#include <algorithm>
#include <thread>

#include "hspmd/comm/gloo_communicator.h"
#include "hspmd/comm/prefix_store.h"
#include "hspmd/comm/self_communicator.h"
#include "hspmd/core/error.h"

namespace hspmd::comm {

Backend gloo_backend(const GlooBackendOptions& options) {
  // The device is made lazily so a backend that never connects opens no socket.
  auto device = std::make_shared<std::shared_ptr<gloo::transport::Device>>();
  auto mutex = std::make_shared<std::mutex>();
  return [options, device, mutex](Store& store, const std::vector<int>& ranks, int global_rank, int generation) {
    {
      std::lock_guard<std::mutex> lock(*mutex);
      if (!*device) *device = make_gloo_device(options.host);
    }
    return std::make_shared<GlooCommunicator>(store, ranks, global_rank, generation, *device, options.timeout);
  };
}

GroupCache::GroupCache(std::shared_ptr<Store> store, int global_rank, Backend backend, int generation)
    : store_(std::move(store)), global_rank_(global_rank), backend_(std::move(backend)), generation_(generation) {
  HSPMD_CHECK(backend_ != nullptr || store_ == nullptr)
      << "group cache of rank " << global_rank_ << " has a store but no backend";
}

GroupCache::~GroupCache() {
  if (retired_.empty()) return;
  // An aborted communicator's worker may stay inside its operation until the transport times
  // out; destroying it joins that thread, which must not hold up the process's exit.
  std::thread([retired = std::move(retired_)] {}).detach();
}

std::shared_ptr<Communicator> GroupCache::get(const std::vector<int>& ranks, const std::string& channel) {
  std::vector<int> group = canonical_group(ranks);
  HSPMD_CHECK(std::find(group.begin(), group.end(), global_rank_) != group.end())
      << "rank " << global_rank_ << " asked for group [" << group_key(group) << "], which it is not in";
  HSPMD_CHECK(channel.find('/') == std::string::npos)
      << "rank " << global_rank_ << ": channel '" << channel << "' of group [" << group_key(group)
      << "] contains '/', which would make its store keys ambiguous";
  const auto key = std::make_pair(group, channel);
  std::promise<std::shared_ptr<Communicator>> promise;
  std::shared_future<std::shared_ptr<Communicator>> future;
  int generation = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    HSPMD_CHECK(aborted_.empty()) << "rank " << global_rank_ << ": group [" << group_key(group)
                                  << "] is unavailable: communication was aborted (" << aborted_ << ")";
    auto it = groups_.find(key);
    if (it != groups_.end()) {
      future = it->second;
    } else {
      generation = generation_;
      groups_.emplace(key, promise.get_future().share());
    }
  }
  // Cached or being connected by another thread of this rank: wait for it (rethrows its error).
  if (future.valid()) return future.get();
  if (group.size() == 1) {  // a group of one needs no transport
    auto comm = std::make_shared<SelfCommunicator>(global_rank_, generation);
    promise.set_value(comm);
    return comm;
  }
  HSPMD_CHECK(store_ != nullptr) << "rank " << global_rank_ << " asked for group [" << group_key(group)
                                 << "], but its group cache has no store (it serves single-member groups only)";

  // Connecting waits for every member, so it runs outside the lock: another thread of this rank
  // may meanwhile connect a different group or channel that a peer needs before it joins this one.
  std::string prefix = "gen" + std::to_string(generation) + "/group/" + group_key(group) + "/";
  if (!channel.empty()) prefix += channel + "/";
  try {
    PrefixStore group_store(store_, prefix);
    auto comm = backend_(group_store, group, global_rank_, generation);
    promise.set_value(comm);
    std::string aborted;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (generation == generation_) aborted = aborted_;
    }
    // abort() came while this group was connecting (it aborts connected groups only).
    if (!aborted.empty()) comm->abort(aborted);
    return comm;
  } catch (...) {
    promise.set_exception(std::current_exception());
    // Forget the failed attempt (unless reset() already dropped it) so a later get() retries.
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = groups_.find(key);
    if (it != groups_.end() && generation == generation_) groups_.erase(it);
    throw;
  }
}

void GroupCache::reset(int generation) {
  std::lock_guard<std::mutex> lock(mutex_);
  HSPMD_CHECK(generation > generation_) << "rank " << global_rank_ << ": new generation " << generation
                                        << " is not after the current " << generation_;
  for (auto& [key, future] : groups_) retired_.push_back(std::move(future));
  groups_.clear();
  generation_ = generation;
  aborted_.clear();
}

void GroupCache::abort(const std::string& reason) {
  std::vector<std::shared_future<std::shared_ptr<Communicator>>> connected;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = reason.empty() ? "aborted" : reason;
    for (auto& [key, future] : groups_) {
      // A group still connecting is left to fail by its own timeout (or the peers' closed sockets).
      if (future.wait_for(std::chrono::seconds(0)) == std::future_status::ready) connected.push_back(future);
    }
  }
  for (auto& future : connected) {
    try {
      future.get()->abort(reason);
    } catch (const std::exception&) {
      // Its connect failed: nothing to abort.
    }
  }
}

std::string GroupCache::aborted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_;
}

int GroupCache::generation() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return generation_;
}

size_t GroupCache::cached() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return groups_.size();
}

}  // namespace hspmd::comm
