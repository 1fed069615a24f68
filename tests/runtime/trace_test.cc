// Tracer: spans become Chrome-trace "X" events that parse back with the right names, categories,
// times and pids; the process is labelled "rank N"; summary() merges overlapping spans of one
// category; a disabled tracer records nothing; spans from two threads get distinct tids.
#include "hspmd/runtime/trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "hspmd/core/json_file.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

using ::testing::HasSubstr;
using testing::error_of;

class TraceTest : public testing::TempDirTest {};

TEST_F(TraceTest, WritesChromeTraceThatParsesBack) {
  Tracer tracer(/*rank=*/2, /*enabled=*/true);
  { TraceSpan s(tracer, "adam", "optimizer"); }
  // Later than the span, recorded out of order: the file lists spans by start time.
  const double t = tracer.now_us() + 1.0;
  tracer.record("F0", "compute", t + 10.0, t + 110.0);
  tracer.record("recv act", "comm", t + 5.0, t + 8.5);
  const std::string path = this->path("trace.rank2.json");
  tracer.write(path);

  const nlohmann::json j = parse_json_object(read_text_file(path, "trace"), path);
  EXPECT_EQ(j.at("displayTimeUnit"), "ms");
  const nlohmann::json& events = j.at("traceEvents");
  ASSERT_TRUE(events.is_array());
  ASSERT_EQ(events.size(), 4u);
  // Metadata names the process track.
  EXPECT_EQ(events[0].at("ph"), "M");
  EXPECT_EQ(events[0].at("name"), "process_name");
  EXPECT_EQ(events[0].at("pid"), 2);
  EXPECT_EQ(events[0].at("args").at("name"), "rank 2");
  // Spans follow, ordered by start time.
  EXPECT_EQ(events[1].at("name"), "adam");
  EXPECT_EQ(events[1].at("cat"), "optimizer");
  EXPECT_EQ(events[1].at("ph"), "X");
  EXPECT_GE(events[1].at("dur").get<double>(), 0.0);
  EXPECT_EQ(events[2].at("name"), "recv act");
  EXPECT_EQ(events[2].at("cat"), "comm");
  EXPECT_EQ(events[2].at("ph"), "X");
  EXPECT_DOUBLE_EQ(events[2].at("ts").get<double>(), t + 5.0);
  EXPECT_DOUBLE_EQ(events[2].at("dur").get<double>(), 3.5);
  EXPECT_EQ(events[2].at("pid"), 2);
  EXPECT_EQ(events[2].at("tid"), 0);
  EXPECT_EQ(events[3].at("name"), "F0");
  EXPECT_EQ(events[3].at("cat"), "compute");
  EXPECT_DOUBLE_EQ(events[3].at("ts").get<double>(), t + 10.0);
  EXPECT_DOUBLE_EQ(events[3].at("dur").get<double>(), 100.0);
  // Written atomically: nothing but the trace is left in the directory.
  int files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 1);
}

TEST_F(TraceTest, WriteToBadPathNamesIt) {
  Tracer tracer(0, true);
  EXPECT_THAT(error_of([&] { tracer.write(path("missing-dir/trace.json")); }), HasSubstr("missing-dir/trace.json"));
}

TEST(TracerTest, SpanCoversItsScope) {
  Tracer tracer(0, true);
  const double before = tracer.now_us();
  {
    TraceSpan s(tracer, "F1", "compute");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const double after = tracer.now_us();
  const std::vector<TraceEvent> events = tracer.events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].name, "F1");
  EXPECT_EQ(events[0].category, "compute");
  EXPECT_GE(events[0].start_us, before);
  EXPECT_GE(events[0].duration_us, 4000.0);  // slept 5 ms; allow clock granularity
  EXPECT_LE(events[0].start_us + events[0].duration_us, after);
}

TEST(TracerTest, SummaryMergesOverlapsWithinACategory) {
  Tracer tracer(0, true);
  // compute: [0,100) and [50,150) overlap -> 150 us; [200,250) apart -> +50; nested [210,220) -> +0.
  tracer.record("F0", "compute", 0, 100);
  tracer.record("F1", "compute", 50, 150);
  tracer.record("B0", "compute", 200, 250);
  tracer.record("inner", "compute", 210, 220);
  // comm overlaps compute but is counted in its own category only; touching spans merge.
  tracer.record("send", "comm", 100, 180);
  tracer.record("recv", "comm", 180, 190);
  tracer.record("step", "optimizer", 390, 400);
  const TraceSummary s = tracer.summary();
  EXPECT_NEAR(s.window_seconds, 400e-6, 1e-12);
  ASSERT_EQ(s.seconds.size(), 3u);
  EXPECT_NEAR(s.seconds.at("compute"), 200e-6, 1e-12);
  EXPECT_NEAR(s.seconds.at("comm"), 90e-6, 1e-12);
  EXPECT_NEAR(s.seconds.at("optimizer"), 10e-6, 1e-12);
  EXPECT_NEAR(s.share("compute"), 0.5, 1e-9);
  EXPECT_NEAR(s.share("optimizer"), 0.025, 1e-9);
  EXPECT_EQ(s.share("absent"), 0.0);
}

TEST(TracerTest, WindowStartsAtTheFirstSpan) {
  Tracer tracer(0, true);
  tracer.record("late", "compute", 1000, 1500);
  tracer.record("later", "comm", 1400, 2000);
  const TraceSummary s = tracer.summary();
  EXPECT_NEAR(s.window_seconds, 1000e-6, 1e-12);
  EXPECT_NEAR(s.share("compute"), 0.5, 1e-9);
}

TEST(TracerTest, EmptySummaryAndClear) {
  Tracer tracer(0, true);
  TraceSummary empty = tracer.summary();
  EXPECT_EQ(empty.window_seconds, 0.0);
  EXPECT_TRUE(empty.seconds.empty());
  EXPECT_EQ(empty.share("compute"), 0.0);
  tracer.record("F0", "compute", 0, 10);
  tracer.clear();
  EXPECT_TRUE(tracer.events().empty());
  EXPECT_EQ(tracer.summary().window_seconds, 0.0);
}

TEST(TracerTest, DisabledTracerRecordsNothing) {
  Tracer tracer(1);  // disabled by default
  EXPECT_FALSE(tracer.enabled());
  { TraceSpan s(tracer, "F0", "compute"); }
  tracer.record("F1", "compute", 0, 10);
  tracer.record("bad", "compute", 10, 0);  // not even validated: disabled means no work
  EXPECT_TRUE(tracer.events().empty());
  EXPECT_EQ(tracer.summary().window_seconds, 0.0);
}

TEST(TracerTest, RejectsSpanEndingBeforeItStarts) {
  Tracer tracer(3, true);
  EXPECT_THAT(error_of([&] { tracer.record("B2", "compute", 10, 5); }),
              HasSubstr("trace span \"B2\" (compute) on rank 3: end 5 us is before start 10 us"));
}

TEST(TracerTest, ConcurrentSpansFromTwoThreads) {
  Tracer tracer(0, true);
  constexpr int kSpans = 200;
  auto work = [&](const std::string& category) {
    for (int i = 0; i < kSpans; ++i) TraceSpan s(tracer, category + std::to_string(i), category);
  };
  { TraceSpan first(tracer, "setup", "compute"); }  // this thread records first: tid 0
  std::thread a(work, "comm");
  std::thread b(work, "optimizer");
  a.join();
  b.join();
  const std::vector<TraceEvent> events = tracer.events();
  ASSERT_EQ(events.size(), 1u + 2 * kSpans);
  std::map<std::string, std::set<int>> tids;
  for (const TraceEvent& e : events) tids[e.category].insert(e.tid);
  EXPECT_EQ(tids["compute"], std::set<int>{0});
  // Each thread keeps one tid; the two worker threads got 1 and 2 in some order.
  ASSERT_EQ(tids["comm"].size(), 1u);
  ASSERT_EQ(tids["optimizer"].size(), 1u);
  EXPECT_EQ((std::set<int>{*tids["comm"].begin(), *tids["optimizer"].begin()}), (std::set<int>{1, 2}));
}

}  // namespace
}  // namespace hspmd::runtime
