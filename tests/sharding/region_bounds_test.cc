// A region's corners keep up to four coordinates inline and spill more to the heap; either way they
// read, compare and order like the std::vector<int64_t> they replaced, so plans sorted or keyed by
// regions come out in the same order.
#include "hspmd/sharding/region_bounds.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "hspmd/sharding/region.h"

namespace hspmd::sharding {
namespace {

std::vector<int64_t> values(const RegionBounds& b) { return {b.begin(), b.end()}; }

TEST(RegionBounds, GrowsPastTheInlineDimsAndShrinksBack) {
  RegionBounds b;
  EXPECT_TRUE(b.empty());
  std::vector<int64_t> expected;
  for (int64_t v = 1; v <= 7; ++v) {  // crosses kInlineDims = 4
    b.push_back(v * 10);
    expected.push_back(v * 10);
    ASSERT_EQ(values(b), expected);
  }
  b[5] = -1;
  expected[5] = -1;
  EXPECT_EQ(values(b), expected);
  b.resize(9, 3);
  expected.resize(9, 3);
  EXPECT_EQ(values(b), expected);
  b.resize(3);  // back inline: the first three survive
  EXPECT_EQ(values(b), (std::vector<int64_t>{10, 20, 30}));
  b.resize(5);  // the new ones are zero, not what a longer past left behind
  EXPECT_EQ(values(b), (std::vector<int64_t>{10, 20, 30, 0, 0}));
  b.assign(2, 7);
  EXPECT_EQ(values(b), (std::vector<int64_t>{7, 7}));
}

TEST(RegionBounds, CopiesAndMovesKeepTheirOwnValues) {
  for (const std::vector<int64_t>& v : {std::vector<int64_t>{1, 2}, std::vector<int64_t>{1, 2, 3, 4, 5, 6}}) {
    RegionBounds a = v;
    RegionBounds copy = a;
    copy[0] = 99;
    EXPECT_EQ(values(a), v);
    RegionBounds moved = std::move(a);
    EXPECT_EQ(values(moved), v);
    EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): a moved-from corner is empty
    a = moved;
    EXPECT_EQ(values(a), v);
    const std::vector<int64_t> back = moved;
    EXPECT_EQ(back, v);
  }
}

TEST(RegionBounds, OrdersLikeTheVectorItReplaced) {
  const std::vector<std::vector<int64_t>> cases{{}, {0}, {0, 5}, {1}, {0, 4, 9}, {0, 4, 9, 2, 1}, {0, 4, 9, 2, 1, 0},
                                                {2, 0, 0, 0, 0}, {0, 4, 9, 2}};
  for (const auto& x : cases) {
    for (const auto& y : cases) {
      const RegionBounds a = x, b = y;
      EXPECT_EQ(a == b, x == y);
      EXPECT_EQ(a < b, x < y) << ::testing::PrintToString(x) << " vs " << ::testing::PrintToString(y);
    }
  }
}

TEST(RegionBounds, RegionsOfManyDimsWorkAsOfFew) {
  const Region whole = Region::full(Shape{4, 2, 2, 2, 6, 3});  // six dims: spilled corners
  const Region left = whole.piece(4, 2, 0), right = whole.piece(4, 2, 1);
  EXPECT_EQ(left.to_string(), "[0:4, 0:2, 0:2, 0:2, 0:3, 0:3]");
  EXPECT_EQ(left.numel() + right.numel(), whole.numel());
  EXPECT_TRUE(whole.contains(right));
  EXPECT_FALSE(left.intersect(right).has_value());
  EXPECT_EQ(*whole.intersect(right), right);
  std::map<Region, int> by_region{{right, 1}, {left, 0}};
  EXPECT_EQ(by_region.begin()->second, 0);
}

}  // namespace
}  // namespace hspmd::sharding
