// A collective's members are held once and shared by every member's op; the group still reads and
// compares by its ranks, and ops resolved by the resolver share one list per collective.
#include "hspmd/resolve/comm_group.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "hspmd/resolve/resolver.h"
#include "hspmd/sharding/annotation.h"

namespace hspmd::resolve {
namespace {

TEST(CommGroup, ReadsAndComparesByItsRanks) {
  const CommGroup none;
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none, std::vector<int>{});
  const CommGroup g = std::vector<int>{0, 8, 16};
  EXPECT_EQ(g.size(), 3u);
  EXPECT_EQ(g[1], 8);
  EXPECT_EQ(std::vector<int>(g.begin(), g.end()), (std::vector<int>{0, 8, 16}));
  EXPECT_EQ(g, (CommGroup{0, 8, 16}));  // a separate list with the same ranks
  EXPECT_FALSE(g == (CommGroup{0, 16, 8}));
  EXPECT_FALSE(g == none);
}

// Every op of one collective names the same list, in the bottom tier (a data-parallel all-reduce
// over 16 ranks) and in the top tier (an all-reduce across two pipelines, per finest slice).
void expect_one_list_per_collective(const Resolution& r, size_t members) {
  std::map<std::vector<int>, const std::vector<int>*> list_of;
  int collectives = 0;
  for (const ResolveStep& step : r.steps) {
    for (const auto& [device, ops] : step.ops) {
      for (const CommOp& op : ops) {
        if (op.kind != CommKind::kAllReduce) continue;
        ++collectives;
        EXPECT_EQ(op.group.size(), members);
        const auto [it, first] = list_of.emplace(op.group.ranks(), &op.group.ranks());
        EXPECT_EQ(it->second, &op.group.ranks()) << "device " << device << " holds its own copy of its group";
      }
    }
  }
  EXPECT_GT(collectives, 0);
}

TEST(CommGroup, MembersOfOneCollectiveShareTheirList) {
  const Shape shape{32, 8};
  expect_one_list_per_collective(
      resolve(sharding::Annotation::parse("dup{[0-15](P:16)}"), sharding::Annotation::parse("dup{[0-15](D:16)}"), shape, "grad"),
      16);
  expect_one_list_per_collective(resolve(sharding::Annotation::parse("partial{[0-1](S1:2);[2-3](S1:2)}"),
                                         sharding::Annotation::parse("dup{[0-1](S1:2);[2-3](S1:2)}"), shape, "grad"),
                                 2);
}

}  // namespace
}  // namespace hspmd::resolve
