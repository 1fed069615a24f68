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

}  // namespace
}  // namespace hspmd::sharding
