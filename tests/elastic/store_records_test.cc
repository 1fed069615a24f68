// The elastic run's store records (commits, plans, progress): what elastic_run.cc writes parses
// back exactly; anything else is an Error naming the store key, never a crash or a std exception.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "hspmd/core/error.h"
#include "hspmd/elastic/store_records.h"
#include "error_of.h"

namespace hspmd::elastic {
namespace {

using ::testing::HasSubstr;

using hspmd::testing::error_of;

TEST(StoreRecords, StepTotalsRoundTripExactly) {
  const std::vector<double> totals = {0.1 + 0.2, 5.602812345678901};
  EXPECT_EQ(parse_step_totals(step_totals_text(totals), "gen0/commit/3"), totals);
  EXPECT_TRUE(std::isinf(parse_step_totals("inf 2", "k")[0])) << "a diverged run commits inf";
  for (const char* bad : {"", "1", "1 ", " 1 2", "1  2", "1 2 3", "1 2x", "x 2", "1,2"}) {
    EXPECT_THAT(error_of([&] { parse_step_totals(bad, "gen0/commit/3"); }), HasSubstr("store key gen0/commit/3"))
        << "'" << bad << "'";
  }
  EXPECT_THAT(error_of([] { parse_step_totals(std::string("1 2\0", 4), "k"); }), HasSubstr("not two numbers"));
}

TEST(StoreRecords, PlanRecord) {
  const PlanRecord ok = parse_plan_record(
      R"({"dead": [1, 3], "strategy": "{\"name\": \"x\"}", "predicted_step_seconds": 0.25})", "gen1/plan");
  EXPECT_EQ(ok.dead, (std::vector<int>{1, 3}));
  EXPECT_EQ(ok.strategy_text, R"({"name": "x"})");
  EXPECT_EQ(ok.predicted_step_seconds, 0.25);
  EXPECT_FALSE(ok.error.has_value());
  const PlanRecord failed = parse_plan_record(R"({"dead": [], "error": "no plan"})", "gen1/plan");
  EXPECT_EQ(failed.error, "no plan");
  for (const char* bad : {"", "[]", "{", R"({"dead": [1]})", R"({"dead": "1", "error": "e"})",
                          R"({"dead": [-1], "error": "e"})", R"({"dead": [3, 1], "error": "e"})",
                          R"({"dead": [1.5], "error": "e"})", R"({"dead": [], "error": 3})",
                          R"({"dead": [], "strategy": 1, "predicted_step_seconds": 1})",
                          R"({"dead": [], "strategy": "s", "predicted_step_seconds": -1})",
                          R"({"dead": [], "strategy": "s", "predicted_step_seconds": "1"})"}) {
    EXPECT_THAT(error_of([&] { parse_plan_record(bad, "gen1/plan"); }), HasSubstr("store key gen1/plan")) << bad;
  }
}

TEST(StoreRecords, ProgressRecord) {
  const ProgressRecord ok = parse_progress_record(R"({"step": 4, "loader": "{}", "strategy": "s"})", "gen2/progress");
  EXPECT_EQ(ok.step, 4);
  EXPECT_EQ(ok.loader_json, "{}");
  EXPECT_EQ(ok.strategy_text, "s");
  for (const char* bad : {"null", R"({"step": -1, "loader": "{}", "strategy": "s"})",
                          R"({"step": 18446744073709551615, "loader": "{}", "strategy": "s"})",
                          R"({"step": 1.5, "loader": "{}", "strategy": "s"})", R"({"step": 1, "strategy": "s"})",
                          R"({"step": 1, "loader": {}, "strategy": "s"})"}) {
    EXPECT_THAT(error_of([&] { parse_progress_record(bad, "gen2/progress"); }), HasSubstr("store key gen2/progress"))
        << bad;
  }
}

}  // namespace
}  // namespace hspmd::elastic
