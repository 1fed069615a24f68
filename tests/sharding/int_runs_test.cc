// The runs notation shared by device groups, strategy files and the explain report.
#include "hspmd/sharding/int_runs.h"

#include <gtest/gtest.h>

namespace hspmd::sharding {
namespace {

TEST(IntRuns, ConsecutiveAscendingValuesJoinARun) {
  EXPECT_EQ(runs_text({}), "");
  EXPECT_EQ(runs_text({7}), "7");
  EXPECT_EQ(runs_text({0, 1, 2, 3, 8}), "0-3,8");
  EXPECT_EQ(runs_text({0, 1, 8, 3}), "0-1,8,3");
  EXPECT_EQ(runs_text({3, 2, 1}), "3,2,1");  // descending neighbours stay apart
  EXPECT_EQ(runs_text({4, 5, 9}, ".."), "4..5,9");
}

TEST(IntRuns, EvenlySpacedValuesJoinAStridedRun) {
  EXPECT_EQ(runs_text({0, 32, 64, 96}), "0-96/32");
  EXPECT_EQ(runs_text({0, 2}), "0,2");  // two values stay apart
  EXPECT_EQ(runs_text({0, 32, 64, 96, 1, 33, 65, 97}), "0-96/32,1-97/32");
  EXPECT_EQ(runs_text({0, 1, 2, 3, 8, 16, 24}), "0-3,8-24/8");
  EXPECT_EQ(runs_text({0, 5, 6, 7}), "0,5-7");
  EXPECT_EQ(runs_text({0, 2, 4}, ".."), "0..4/2");
}


TEST(IntRuns, RunIndexFindsEachValuesPositionAndRepeats) {
  const std::vector<int> values{8, 9, 10, 0, 1, 5, 20, 21};
  const RunIndex where(values);
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(where.position(values[i]), static_cast<int>(i)) << values[i];
  for (int absent : {-1, 2, 4, 6, 7, 11, 19, 22}) EXPECT_EQ(where.position(absent), -1) << absent;
  EXPECT_FALSE(where.repeated());
  EXPECT_EQ(RunIndex(std::vector<int>{}).position(0), -1);
  // A value inside another run, a run that starts where another does, a run reaching into the next.
  EXPECT_EQ(RunIndex({0, 1, 2, 3, 7, 2}).repeated(), 2);
  EXPECT_EQ(RunIndex({4, 5, 4}).repeated(), 4);
  EXPECT_EQ(RunIndex({6, 7, 8, 0, 1, 2, 3, 4, 5, 6}).repeated(), 6);
  EXPECT_EQ(RunIndex({0, 1, 2, 3, 9, 1, 2}).repeated(), 1);
}

}  // namespace
}  // namespace hspmd::sharding
