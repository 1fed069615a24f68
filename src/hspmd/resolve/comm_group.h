// The members of a collective comm op, in order (resolve/comm_op.h). Every member's op of one
// collective names the same members, so the list is held once and shared (immutable) by all of
// their ops: a data-parallel all-reduce over n ranks then stores n numbers, not n per member
// (n x n), which made `explain` of 4,096 ranks grow faster than the ranks.
//
//   CommGroup g = std::vector<int>{0, 8, 16};   CommOp a, b;   a.group = g;   b.group = g;  // one list
//   g.size() == 3;   g[1] == 8;   for (int rank : g) ...;   g == std::vector<int>{0, 8, 16}
#pragma once

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

namespace hspmd::resolve {

class CommGroup {
 public:
  using value_type = int;
  using const_iterator = std::vector<int>::const_iterator;
  using iterator = const_iterator;

  CommGroup() = default;
  // Implicit, like the vector it replaces: `op.group = members`.
  CommGroup(std::vector<int> ranks)  // NOLINT
      : ranks_(ranks.empty() ? nullptr : std::make_shared<const std::vector<int>>(std::move(ranks))) {}
  CommGroup(std::initializer_list<int> ranks) : CommGroup(std::vector<int>(ranks)) {}

  const std::vector<int>& ranks() const { return ranks_ ? *ranks_ : empty_ranks(); }
  operator const std::vector<int>&() const { return ranks(); }  // NOLINT
  size_t size() const { return ranks().size(); }
  bool empty() const { return ranks().empty(); }
  int operator[](size_t i) const { return ranks()[i]; }
  const_iterator begin() const { return ranks().begin(); }
  const_iterator end() const { return ranks().end(); }

  friend bool operator==(const CommGroup& a, const CommGroup& b) {
    return a.ranks_ == b.ranks_ || a.ranks() == b.ranks();
  }
  friend bool operator==(const CommGroup& a, const std::vector<int>& b) { return a.ranks() == b; }

 private:
  static const std::vector<int>& empty_ranks() {
    static const std::vector<int> none;
    return none;
  }

  std::shared_ptr<const std::vector<int>> ranks_;  // null when empty (point-to-point and local ops)
};

}  // namespace hspmd::resolve
