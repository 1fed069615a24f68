#include "hspmd/comm/group_cache.h"

#include <algorithm>

#include "hspmd/comm/gloo_communicator.h"
#include "hspmd/comm/prefix_store.h"
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
  HSPMD_CHECK(store_ != nullptr) << "group cache of rank " << global_rank_ << " without a store";
  HSPMD_CHECK(backend_ != nullptr) << "group cache of rank " << global_rank_ << " without a backend";
}

std::shared_ptr<Communicator> GroupCache::get(const std::vector<int>& ranks) {
  std::vector<int> group = canonical_group(ranks);
  HSPMD_CHECK(std::find(group.begin(), group.end(), global_rank_) != group.end())
      << "rank " << global_rank_ << " asked for group [" << group_key(group) << "], which it is not in";
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = groups_.find(group);
  if (it != groups_.end()) return it->second;
  PrefixStore group_store(store_, "gen" + std::to_string(generation_) + "/group/" + group_key(group) + "/");
  auto comm = backend_(group_store, group, global_rank_, generation_);
  groups_.emplace(group, comm);
  return comm;
}

void GroupCache::reset(int generation) {
  std::lock_guard<std::mutex> lock(mutex_);
  HSPMD_CHECK(generation > generation_) << "rank " << global_rank_ << ": new generation " << generation
                                        << " is not after the current " << generation_;
  groups_.clear();
  generation_ = generation;
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
