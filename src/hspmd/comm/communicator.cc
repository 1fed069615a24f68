#include "hspmd/comm/communicator.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "hspmd/core/error.h"

namespace hspmd::comm {

std::vector<int> canonical_group(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  HSPMD_CHECK(!ranks.empty()) << "empty device group";
  HSPMD_CHECK(std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end())
      << "device group [" << group_key(ranks) << "] lists a rank twice";
  HSPMD_CHECK(ranks.front() >= 0) << "device group [" << group_key(ranks) << "] has a negative rank";
  return ranks;
}

std::string group_key(const std::vector<int>& ranks) {
  std::string key;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) key += ',';
    key += std::to_string(ranks[i]);
  }
  return key;
}

Communicator::Communicator(std::vector<int> ranks, int global_rank, int generation)
    : ranks_(canonical_group(std::move(ranks))), global_rank_(global_rank), generation_(generation) {
  auto it = std::find(ranks_.begin(), ranks_.end(), global_rank_);
  HSPMD_CHECK(it != ranks_.end()) << "rank " << global_rank_ << " is not in group [" << group_key(ranks_)
                                  << "]; ranks outside a group never create it";
  group_rank_ = static_cast<int>(it - ranks_.begin());
}

int Communicator::index_of(int global_rank) const {
  auto it = std::find(ranks_.begin(), ranks_.end(), global_rank);
  HSPMD_CHECK(it != ranks_.end()) << describe() << ": rank " << global_rank << " is not a member";
  return static_cast<int>(it - ranks_.begin());
}

std::string Communicator::describe() const {
  std::ostringstream s;
  s << "group [" << group_key(ranks_) << "] gen " << generation_ << " (rank " << global_rank_ << ")";
  return s.str();
}

namespace {

std::vector<int64_t> default_counts(const Communicator& comm, const char* op, std::vector<int64_t> counts,
                                    int64_t total) {
  if (counts.empty()) {
    HSPMD_CHECK(total % comm.size() == 0) << op << " on " << comm.describe() << ": " << total
                                          << " elements do not split evenly over " << comm.size()
                                          << " members; pass counts";
    return std::vector<int64_t>(comm.size(), total / comm.size());
  }
  HSPMD_CHECK(static_cast<int>(counts.size()) == comm.size())
      << op << " on " << comm.describe() << ": " << counts.size() << " counts for " << comm.size() << " members";
  for (int64_t c : counts) HSPMD_CHECK(c >= 0) << op << " on " << comm.describe() << ": negative count " << c;
  return counts;
}

}  // namespace

std::vector<int64_t> check_reduce_scatter(const Communicator& comm, const ReduceScatterOptions& options) {
  const char* op = "reduce_scatter";
  HSPMD_CHECK(options.input.dtype == options.output.dtype)
      << op << " on " << comm.describe() << ": input is " << dtype_name(options.input.dtype) << ", output is "
      << dtype_name(options.output.dtype);
  auto counts = default_counts(comm, op, options.counts, options.input.count);
  int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  HSPMD_CHECK(total == options.input.count)
      << op << " on " << comm.describe() << ": counts sum to " << total << " but input has " << options.input.count;
  HSPMD_CHECK(options.output.count == counts[comm.group_rank()])
      << op << " on " << comm.describe() << ": output has " << options.output.count << " elements, slice has "
      << counts[comm.group_rank()];
  return counts;
}

std::vector<int64_t> check_allgather(const Communicator& comm, const AllgatherOptions& options) {
  const char* op = "allgather";
  HSPMD_CHECK(options.input.dtype == options.output.dtype)
      << op << " on " << comm.describe() << ": input is " << dtype_name(options.input.dtype) << ", output is "
      << dtype_name(options.output.dtype);
  auto counts = options.counts.empty() ? std::vector<int64_t>(comm.size(), options.input.count)
                                       : default_counts(comm, op, options.counts, 0);
  HSPMD_CHECK(options.input.count == counts[comm.group_rank()])
      << op << " on " << comm.describe() << ": input has " << options.input.count << " elements, counts say "
      << counts[comm.group_rank()];
  int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  HSPMD_CHECK(options.output.count == total)
      << op << " on " << comm.describe() << ": output has " << options.output.count << " elements, expected "
      << total;
  return counts;
}

}  // namespace hspmd::comm
