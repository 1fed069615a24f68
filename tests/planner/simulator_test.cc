// The simulator (planner/simulator.h) on small cases whose answers are known by hand: a trace
// without events is the steps times the cost model's step, an event adds exactly the state movement
// it causes (or the checkpoint restore and the steps run again), a fixed strategy drops the
// pipelines that lost a rank and takes them back when the rank returns, and the planner's policy is
// never slower than a fixed strategy the planner itself chose. Then the trace file's errors and the
// long-tailed batches it draws.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "hspmd/core/error.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/planner/dispatcher.h"
#include "hspmd/planner/planner.h"
#include "hspmd/planner/run_trace.h"
#include "hspmd/planner/simulator.h"
#include "planner/planner_testlib.h"

namespace hspmd::planner {
namespace {

using ::testing::HasSubstr;
using testing::tiny_config;
using testing::two_kind_cluster;
using testing::two_kind_profile;

sharding::Strategy strategy(const std::string& pipelines, int zero = 0) {
  return sharding::Strategy::from_json_text(
      R"({"name": "s", "zero": )" + std::to_string(zero) + R"(, "pipelines": [)" + pipelines + "]}", "s.json");
}

// Two pipelines: rank 0 alone, ranks 2-3 (slow) as two stages; 2 micro-batches of 1 each.
const std::string kTwoPipelines =
    R"({"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-3"}]},
       {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2", "layers": "0-1"},
                                                                  {"ranks": "3", "layers": "2-3"}]})";

// The planner's settings in the simulator (those of the elastic trainer): ZeRO-1 off.
PlannerOptions elastic_options(int64_t global_batch) {
  PlannerOptions o;
  o.global_batch = global_batch;
  o.seq_len = 64;
  o.zero1 = false;
  return o;
}

RunTrace trace(const std::string& rest) {
  return RunTrace::from_json_text(R"({"name": "t", "seq_len": 64, )" + rest + "}", "t.json", 4);
}

class SimulatorTest : public ::testing::Test {
 protected:
  models::Llama model_{tiny_config()};
  resolve::Topology topo_ = two_kind_cluster(2, 2, 1e9);
  Profile profile_ = two_kind_profile();
  CostModel cost_{model_, topo_, profile_, {.seq_len = 64}};
};

TEST_F(SimulatorTest, WithoutEventsEveryStepCostsTheCostModelsStep) {
  const RunTrace t = trace(R"("steps": 10, "global_batch": 4)");
  const Simulator sim(model_, topo_, profile_, t);
  const sharding::Strategy s = strategy(kTwoPipelines);
  const PolicyRun run = sim.fixed_run(s);
  EXPECT_TRUE(run.stopped.empty()) << run.stopped;
  EXPECT_EQ(run.steps, 10);
  EXPECT_DOUBLE_EQ(run.total_seconds(), 10 * cost_.predict(s).step_seconds);
  EXPECT_EQ(run.switches + run.restores, 0);
  EXPECT_DOUBLE_EQ(run.tokens, 10 * 4 * 64);
  EXPECT_DOUBLE_EQ(run.tokens_per_second(), 10 * 4 * 64 / run.total_seconds());
}

// All of the model's state (weights and two moments, float32) moving from rank 0 to rank 1 over
// their node's link: one message of 12 bytes a parameter at 1e10 bytes/s.
TEST_F(SimulatorTest, MovingTheWholeModelTakesItsBytesOverTheLink) {
  const Simulator sim(model_, topo_, profile_, trace(R"("steps": 1, "global_batch": 1)"));
  const auto on = [](int rank) {
    return strategy(R"({"micro_batch_size": 1, "num_micro_batches": 1, "stages": [{"ranks": ")" +
                    std::to_string(rank) + R"(", "layers": "0-3"}]})");
  };
  double parameters = 0;
  for (const auto& [name, shape] : models::parameter_shapes(model_)) parameters += static_cast<double>(shape.numel());
  EXPECT_NEAR(*sim.move_seconds(on(0), on(1), {}), 12 * parameters / 1e10, 1e-12);
  // Rank 0 dead: its state has no other copy.
  EXPECT_FALSE(sim.move_seconds(on(0), on(1), {0}).has_value());
}

// The planner's policy: before the loss its plan's step, after it the re-plan's, after the return
// the next re-plan's, and at each event exactly the movement from one plan to the next (the lost
// rank sending nothing).
TEST_F(SimulatorTest, EachEventAddsExactlyThePredictedSwitch) {
  // Equal kinds: the plan has data-parallel replicas, so a loss leaves a copy of every slice.
  const Profile profile = two_kind_profile(1.0);
  const Planner planner(model_, topo_, profile, elastic_options(4));
  const Plan first = planner.plan();
  const int lost = first.strategy.ranks().back();
  std::vector<int> survivors = {0, 1, 2, 3};
  std::erase(survivors, lost);
  const Plan after_loss = planner.replan(first.strategy, survivors);
  const Plan after_return = planner.replan(after_loss.strategy, {0, 1, 2, 3});

  const std::string rank = std::to_string(lost);
  const RunTrace t = trace(R"("steps": 10, "global_batch": 4,
                              "events": [{"step": 4, "lose": ")" + rank + R"("}, {"step": 7, "return": ")" + rank + R"("}])");
  const Simulator sim(model_, topo_, profile, t);
  const std::vector<PolicyRun> runs = sim.planner_runs();
  ASSERT_EQ(runs.size(), 1u);
  const PolicyRun& run = runs[0];
  EXPECT_TRUE(run.stopped.empty()) << run.stopped;
  const std::optional<double> at_loss = sim.move_seconds(first.strategy, after_loss.strategy, {lost});
  const std::optional<double> at_return = sim.move_seconds(after_loss.strategy, after_return.strategy, {});
  ASSERT_TRUE(at_loss.has_value()) << first.strategy.to_json_text();
  EXPECT_GT(*at_return, 0) << "the returned rank fetches its state";
  EXPECT_EQ(run.switches, 2);
  EXPECT_DOUBLE_EQ(run.switch_seconds, *at_loss + *at_return);
  EXPECT_DOUBLE_EQ(run.step_seconds, 4 * first.prediction.step_seconds + 3 * after_loss.prediction.step_seconds +
                                         3 * after_return.prediction.step_seconds);
  EXPECT_DOUBLE_EQ(run.total_seconds(), run.step_seconds + *at_loss + *at_return);
  ASSERT_EQ(run.log.size(), 2u);
  EXPECT_THAT(run.log[0], HasSubstr("lost " + rank));
  EXPECT_THAT(run.log[1], HasSubstr("returned " + rank));
}

TEST_F(SimulatorTest, AFixedStrategyDropsThePipelineThatLostARankAndTakesItBack) {
  const RunTrace t = trace(R"("steps": 10, "global_batch": 4,
                              "events": [{"step": 3, "lose": "2"}, {"step": 7, "return": "2"}])");
  const Simulator sim(model_, topo_, profile_, t);
  const sharding::Strategy s = strategy(kTwoPipelines);
  const sharding::Strategy alone = surviving_pipelines(s, {0, 1, 3}, 4);
  ASSERT_EQ(alone.pipelines.size(), 1u);
  EXPECT_EQ(alone.pipelines[0].num_micro_batches, 4) << "the survivor takes the whole global batch";
  const PolicyRun run = sim.fixed_run(s);
  EXPECT_TRUE(run.stopped.empty()) << run.stopped;
  // Dropping a replica moves nothing; the returning ranks fetch their pipeline's state.
  const double back = *sim.move_seconds(alone, s, {});
  EXPECT_GT(back, 0);
  EXPECT_DOUBLE_EQ(*sim.move_seconds(s, alone, {2}), 0);
  EXPECT_EQ(run.switches, 2);
  EXPECT_DOUBLE_EQ(run.switch_seconds, back);
  EXPECT_DOUBLE_EQ(run.step_seconds,
                   6 * cost_.predict(s).step_seconds + 4 * cost_.predict(alone).step_seconds);
}

TEST(SurvivingPipelinesTest, TheGlobalBatchIsSpreadInProportionRoundedUpToMicroBatches) {
  const sharding::Strategy s = strategy(
      R"({"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-3"}]},
         {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "1", "layers": "0-3"}]},
         {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2", "layers": "0-3"}]})");
  // Batch 8 over the pipelines of ranks 0 and 1 (shares 2 and 4 of 6): 8/3 -> 3 micro-batches of
  // 1, 16/3 -> 3 micro-batches of 2.
  const sharding::Strategy kept = surviving_pipelines(s, {0, 1}, 8);
  ASSERT_EQ(kept.pipelines.size(), 2u);
  EXPECT_EQ(kept.pipelines[0].num_micro_batches, 3);
  EXPECT_EQ(kept.pipelines[1].num_micro_batches, 3);
  EXPECT_EQ(surviving_pipelines(s, {0, 1, 2}, 8), s) << "nothing lost: the strategy as it is";
  try {
    surviving_pipelines(s, {3}, 8);
    FAIL() << "no pipeline is whole";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no pipeline has all its ranks"));
  }
}

// ZeRO-1 shards the moments over the two pipelines: losing one loses its shard, so the run restores
// the checkpoint of step 5 and runs steps 5 and 6 again under the surviving pipeline.
TEST_F(SimulatorTest, StateWithoutACopyRestoresTheCheckpointAndRunsItsStepsAgain) {
  const sharding::Strategy s = strategy(kTwoPipelines, /*zero=*/1);
  const sharding::Strategy alone = surviving_pipelines(s, {0, 1, 3}, 4);
  {
    const RunTrace t = trace(R"("steps": 10, "global_batch": 4, "checkpoint": {"every": 5, "restore_seconds": 2.5},
                                "events": [{"step": 7, "lose": "2"}])");
    const PolicyRun run = Simulator(model_, topo_, profile_, t).fixed_run(s);
    EXPECT_TRUE(run.stopped.empty()) << run.stopped;
    EXPECT_EQ(run.restores, 1);
    EXPECT_EQ(run.switches, 0);
    const double after = cost_.predict(alone).step_seconds;
    EXPECT_DOUBLE_EQ(run.recovery_seconds, 2.5 + 2 * after);
    EXPECT_DOUBLE_EQ(run.step_seconds, 7 * cost_.predict(s).step_seconds + 3 * after);
  }
  const RunTrace t = trace(R"("steps": 10, "global_batch": 4, "events": [{"step": 7, "lose": "2"}])");
  const PolicyRun run = Simulator(model_, topo_, profile_, t).fixed_run(s);
  EXPECT_EQ(run.steps, 7);
  EXPECT_THAT(run.stopped, HasSubstr("no surviving copy and the trace gives no checkpoint"));
}

TEST_F(SimulatorTest, AFixedStrategyWithoutAWholePipelineStops) {
  const RunTrace t = trace(R"("steps": 10, "global_batch": 2, "events": [{"step": 5, "lose": "0"}])");
  const PolicyRun run = Simulator(model_, topo_, profile_, t)
                            .fixed_run(strategy(R"({"micro_batch_size": 1, "num_micro_batches": 2,
                                                    "stages": [{"ranks": "0", "layers": "0-3"}]})"));
  EXPECT_EQ(run.steps, 5);
  EXPECT_THAT(run.stopped, HasSubstr("before step 5 (lost 0)"));
  EXPECT_THAT(run.stopped, HasSubstr("no pipeline has all its ranks"));
}

// The fixed strategy is the planner's own plan (with the planner's settings), so the planner could
// keep it: without events the two are the same run. After each loss (and the return) the
// planner's re-plan, the fastest it finds (tolerance 0), is at least as fast as the fixed rule's
// surviving pipelines, which its search space holds; it can lose only by moving more state (the
// re-plan does not weigh its movement against the steps left), and it trains on where the fixed
// strategy has no whole pipeline left.
TEST_F(SimulatorTest, ThePlannerIsNeverSlowerThanAFixedStrategyItCouldChoose) {
  // Slow devices 3x slower (the plan leaves them out) and equal ones (data-parallel replicas).
  for (const double slowdown : {3.0, 1.0}) {
    const Profile profile = two_kind_profile(slowdown);
    const Planner planner(model_, topo_, profile, elastic_options(4));
    const sharding::Strategy chosen = planner.plan().strategy;
    {
      const RunTrace t = trace(R"("steps": 20, "global_batch": 4)");
      const Simulator sim(model_, topo_, profile, t);
      EXPECT_DOUBLE_EQ(sim.planner_runs()[0].total_seconds(), sim.fixed_run(chosen).total_seconds());
    }
    for (int lost = 0; lost < 4; ++lost) {
      const RunTrace t = trace(R"("steps": 200, "global_batch": 4, "checkpoint": {"every": 50, "restore_seconds": 1},
                                  "events": [{"step": 20, "lose": ")" + std::to_string(lost) +
                               R"("}, {"step": 120, "return": ")" + std::to_string(lost) + R"("}])");
      const Simulator sim(model_, topo_, profile, t, {.replan_tolerance = 0});
      const PolicyRun planned = sim.planner_runs()[0];
      const PolicyRun fixed = sim.fixed_run(chosen);
      const std::string where = "slowdown " + std::to_string(slowdown) + ", lost " + std::to_string(lost);
      EXPECT_TRUE(planned.stopped.empty()) << where << ": " << planned.stopped;
      if (fixed.stopped.empty()) {
        EXPECT_LE(planned.step_seconds, fixed.step_seconds * (1 + 1e-12)) << where;
        EXPECT_LE(planned.total_seconds(), fixed.total_seconds() + planned.switch_seconds) << where;
      } else {
        EXPECT_LT(fixed.steps, planned.steps) << where;
      }
    }
  }
}

TEST_F(SimulatorTest, MixedLengthsAreDispatchedBatchByBatch) {
  const RunTrace t = RunTrace::from_json_text(
      R"({"seq_len": 256, "batches": {"lengths": [[256, 10, 20], [30, 40, 50, 60], [200, 100]]}})", "t.json", 4);
  const Simulator sim(model_, topo_, profile_, t);
  const sharding::Strategy s = strategy(kTwoPipelines);
  const PolicyRun run = sim.fixed_run(s);
  EXPECT_TRUE(run.stopped.empty()) << run.stopped;
  const std::vector<PipelineModel> pipes = pipeline_models(cost_.at_seq_len(256), s, {.seq_len = 256});
  double expected = 0;
  for (int64_t step = 0; step < 3; ++step) expected += dispatch(t.lengths_of(step), pipes).step_seconds;
  EXPECT_DOUBLE_EQ(run.total_seconds(), expected);
  EXPECT_DOUBLE_EQ(run.tokens, 286 + 180 + 300);
  // The planner's two runs: its heterogeneous strategy and its strategies per maximum length.
  const std::vector<PolicyRun> planned = sim.planner_runs();
  ASSERT_EQ(planned.size(), 2u);
  for (const PolicyRun& p : planned) {
    EXPECT_EQ(p.steps, 3) << p.name << ": " << p.stopped;
    EXPECT_GT(p.tokens_per_second(), 0);
  }
  // The same set of one strategy per maximum length: no switches, the dispatch's steps.
  const PolicyRun one = sim.length_set_run({{256, s}}, "one");
  EXPECT_EQ(one.switches, 0);
  EXPECT_DOUBLE_EQ(one.total_seconds(), expected);
  try {
    RunTrace both = t;
    both.events.push_back({.step = 1, .lose = {2}});
    Simulator(model_, topo_, profile_, both);
    FAIL() << "events with mixed lengths";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("both mixed lengths and events"));
  }
}

TEST(RunTraceTest, ErrorsNameTheKeyAtFault) {
  const auto error_of = [](const std::string& text) {
    try {
      RunTrace::from_json_text(text, "t.json", 8);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error_of(R"({"seq_len": 64, "steps": 5, "global_batch": 2, "events": [{"step": 1, "retrun": "3"}]})"),
              HasSubstr(R"(t.json.events[0]: unknown key "retrun" (did you mean "return"?))"));
  EXPECT_THAT(error_of(R"({"seq_len": 64, "steps": 5, "global_batch": 2, "events": [{"step": 5, "lose": "3"}]})"),
              HasSubstr("t.json.events[0].step: expected a step in [0, 5)"));
  EXPECT_THAT(error_of(R"({"seq_len": 64, "steps": 5, "global_batch": 2, "events": [{"step": 1, "lose": "9"}]})"),
              HasSubstr("t.json.events[0].lose: rank 9 is not in the cluster (8 devices)"));
  EXPECT_THAT(error_of(R"({"seq_len": 64, "steps": 5})"), HasSubstr("give either \"global_batch\""));
  EXPECT_THAT(error_of(R"({"seq_len": 64, "batches": {"lengths": [[10, 65]]}})"),
              HasSubstr("t.json.batches.lengths[0]: expected lengths in [1, seq_len = 64], got 65"));
  EXPECT_THAT(error_of(R"({"seq_len": 64, "steps": 5, "global_batch": 2,
                           "events": [{"step": 3, "lose": "1"}, {"step": 2, "return": "1"}]})"),
              HasSubstr("events must be in increasing step order"));
}

TEST(RunTraceTest, LongTailedBatchesAreSeededAndStayWithinTheirTokens) {
  const std::string text = R"({"seq_len": 4096, "steps": 30,
      "batches": {"long_tailed": {"median": 256, "sigma": 1.5, "seed": 7}, "global_batch_tokens": 8192}})";
  const RunTrace a = RunTrace::from_json_text(text, "a.json", 1), b = RunTrace::from_json_text(text, "b.json", 1);
  ASSERT_EQ(a.batches.size(), 30u);
  EXPECT_EQ(a.batches, b.batches);
  int64_t longest = 0;
  for (int64_t s = 0; s < a.steps; ++s) {
    const std::vector<int64_t> l = a.lengths_of(s);
    EXPECT_TRUE(l.size() == 1 || a.tokens_of(s) <= 8192) << "step " << s;
    longest = std::max(longest, *std::max_element(l.begin(), l.end()));
  }
  EXPECT_LE(longest, 4096);
  EXPECT_GT(longest, 2048) << "sigma 1.5 over ~1000 documents reaches the tail";
  const RunTrace other = RunTrace::from_json_text(
      R"({"seq_len": 4096, "steps": 30,
          "batches": {"long_tailed": {"median": 256, "sigma": 1.5, "seed": 8}, "global_batch_tokens": 8192}})",
      "c.json", 1);
  EXPECT_NE(other.batches, a.batches);
}

}  // namespace
}  // namespace hspmd::planner
