// Micro-batch schedules (GPipe, 1F1B): the header's examples, and for a sweep of stage counts and
// micro-batch counts (including fewer micro-batches than stages): every micro-batch runs forward
// once and backward once, its forward first, and activation memory stays within the schedule's
// bound (1F1B: min(S - s, n) micro-batches in flight on stage s; GPipe: all n).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hspmd/core/error.h"
#include "hspmd/specialize/schedule.h"

namespace hspmd::specialize {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(ScheduleTest, HeaderExamples) {
  EXPECT_EQ(to_string(gpipe_schedule(4)), "F0 F1 F2 F3 B0 B1 B2 B3");
  EXPECT_EQ(to_string(one_f_one_b_schedule(4, 3, 0)), "F0 F1 F2 B0 F3 B1 B2 B3");
  EXPECT_EQ(to_string(one_f_one_b_schedule(4, 3, 1)), "F0 F1 B0 F2 B1 F3 B2 B3");
  EXPECT_EQ(to_string(one_f_one_b_schedule(4, 3, 2)), "F0 B0 F1 B1 F2 B2 F3 B3");
  EXPECT_EQ(make_schedule(ScheduleKind::kGPipe, 2, 3, 1), gpipe_schedule(2));
  EXPECT_EQ(make_schedule(ScheduleKind::k1F1B, 4, 3, 0), one_f_one_b_schedule(4, 3, 0));
}

TEST(ScheduleTest, EveryMicroBatchOnceForwardThenBackwardWithinTheMemoryBound) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
    for (int stages = 1; stages <= 5; ++stages) {
      for (int n = 1; n <= 9; ++n) {
        for (int s = 0; s < stages; ++s) {
          const std::vector<Task> sched = make_schedule(kind, n, stages, s);
          const std::string where = std::string(schedule_kind_name(kind)) + " n=" + std::to_string(n) +
                                    " S=" + std::to_string(stages) + " s=" + std::to_string(s) + ": " + to_string(sched);
          ASSERT_EQ(sched.size(), static_cast<size_t>(2 * n)) << where;
          std::vector<int> forward_at(n, -1), backward_at(n, -1);
          for (size_t i = 0; i < sched.size(); ++i) {
            std::vector<int>& at = sched[i].forward ? forward_at : backward_at;
            ASSERT_GE(sched[i].micro_batch, 0) << where;
            ASSERT_LT(sched[i].micro_batch, n) << where;
            EXPECT_EQ(at[sched[i].micro_batch], -1) << "twice: " << where;
            at[sched[i].micro_batch] = static_cast<int>(i);
          }
          for (int m = 0; m < n; ++m) EXPECT_LT(forward_at[m], backward_at[m]) << "micro-batch " << m << " " << where;
          const int bound = kind == ScheduleKind::kGPipe ? n : std::min(stages - s, n);
          EXPECT_EQ(max_in_flight(sched), bound) << where;
        }
      }
    }
  }
}

TEST(ScheduleTest, FewerMicroBatchesThanStages) {
  // Stage 0 of 4 with 2 micro-batches: both forwards warm up, then both backwards.
  EXPECT_EQ(to_string(one_f_one_b_schedule(2, 4, 0)), "F0 F1 B0 B1");
  EXPECT_EQ(to_string(one_f_one_b_schedule(2, 4, 3)), "F0 B0 F1 B1");
  EXPECT_EQ(to_string(one_f_one_b_schedule(1, 4, 0)), "F0 B0");
}

TEST(ScheduleTest, MaxInFlightCountsLiveActivations) {
  EXPECT_EQ(max_in_flight({}), 0);
  EXPECT_EQ(max_in_flight({{true, 0}, {false, 0}, {true, 1}, {false, 1}}), 1);
  EXPECT_EQ(max_in_flight({{true, 0}, {true, 1}, {false, 0}, {true, 2}, {false, 1}, {false, 2}}), 2);
}

TEST(ScheduleTest, ShortStringAbbreviatesPhases) {
  EXPECT_EQ(to_short_string(one_f_one_b_schedule(4, 3, 0)), "F0 F1 F2 B0 F3 B1 B2 B3");  // short: in full
  EXPECT_EQ(to_short_string(one_f_one_b_schedule(32, 4, 0)), "F0..F2, 1F1B F3 B0..F31 B28, B29..B31");
  EXPECT_EQ(to_short_string(one_f_one_b_schedule(32, 4, 3)), "1F1B F0 B0..F31 B31");
  EXPECT_EQ(to_short_string(one_f_one_b_schedule(5, 4, 2)), "F0, 1F1B F1 B0..F4 B3, B4");
  EXPECT_EQ(to_short_string(gpipe_schedule(32)), "F0..F31, B0..B31");
  EXPECT_EQ(to_short_string(one_f_one_b_schedule(6, 8, 0)), "F0..F5, B0..B5");
}

TEST(ScheduleTest, BadArgumentsAreErrors) {
  EXPECT_EQ(parse_schedule_kind("gpipe"), ScheduleKind::kGPipe);
  EXPECT_EQ(parse_schedule_kind("1f1b"), ScheduleKind::k1F1B);
  EXPECT_EQ(schedule_kind_name(ScheduleKind::k1F1B), "1f1b");
  try {
    parse_schedule_kind("pipedream");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr("pipedream"), HasSubstr("gpipe"), HasSubstr("1f1b")));
  }
  EXPECT_THROW(one_f_one_b_schedule(4, 2, 2), Error);
  EXPECT_THROW(gpipe_schedule(0), Error);
}

}  // namespace
}  // namespace hspmd::specialize
