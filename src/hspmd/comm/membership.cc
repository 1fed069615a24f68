#include "hspmd/comm/membership.h"

#include <algorithm>
#include <thread>

#include "hspmd/comm/communicator.h"
#include "hspmd/comm/store_values.h"
#include "hspmd/core/error.h"

namespace hspmd::comm {

Membership::Membership(std::shared_ptr<Store> store, int rank, std::vector<int> members, int generation)
    : store_(std::move(store)), rank_(rank), members_(canonical_group(std::move(members))), generation_(generation) {
  HSPMD_CHECK(std::binary_search(members_.begin(), members_.end(), rank_))
      << "rank " << rank_ << " is not among the members [" << group_key(members_) << "]";
}

std::string Membership::next_key(const std::string& key) const {
  return "gen" + std::to_string(generation_ + 1) + "/" + key;
}

bool Membership::regroup_started() const { return store_->try_get(next_key("proposer")).has_value(); }

const std::vector<int>& Membership::regroup(const Heartbeat& heartbeat, Millis timeout,
                                           const std::vector<int>& candidates) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  store_->set(next_key("join/" + std::to_string(rank_)), "1");
  if (store_->add(next_key("proposer"), 1) == 1) {
    // This rank decides. Undecided = neither joined nor dead; wait for them until the deadline.
    std::vector<int> joined;
    while (true) {
      joined.clear();
      int undecided = 0;
      for (int r : members_) {
        if (store_->try_get(next_key("join/" + std::to_string(r)))) {
          joined.push_back(r);
        } else if (!heartbeat.is_dead(r)) {
          ++undecided;
        }
      }
      if (undecided == 0 || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(Millis(5));
    }
    for (int r : candidates) {
      if (!std::binary_search(members_.begin(), members_.end(), r) &&
          store_->try_get(next_key("join/" + std::to_string(r)))) {
        joined.push_back(r);
      }
    }
    std::sort(joined.begin(), joined.end());
    store_->set(next_key("members"), group_key(joined));
  }
  std::string decided;
  try {
    decided = store_->get(next_key("members"), std::max(Millis(1), std::chrono::duration_cast<Millis>(
                                                                         deadline - std::chrono::steady_clock::now())));
  } catch (const Error& e) {
    HSPMD_THROW() << "rank " << rank_ << ": no membership decision for generation " << generation_ + 1
                  << " (the deciding rank may have died): " << e.what();
  }
  std::vector<int> members = parse_rank_list(decided, next_key("members"));
  HSPMD_CHECK(std::binary_search(members.begin(), members.end(), rank_))
      << "rank " << rank_ << " was excluded from generation " << generation_ + 1 << " (members [" << decided
      << "]): it joined the agreement too late";
  members_ = std::move(members);
  ++generation_;
  return members_;
}

}  // namespace hspmd::comm
