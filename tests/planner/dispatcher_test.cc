// Dispatch by length: the pipeline model against the cost model (with sequence parallelism, ZeRO-2/3
// and the gradient buckets' overlap), balance against exhaustive search, memory limits per pipeline, the error for a
// sequence no pipeline holds, micro-batch packing, and the choice among strategies per maximum length
// counting the switch cost.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <tuple>

#include "hspmd/planner/cost_model.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/planner/dispatcher.h"
#include "hspmd/planner/length_strategies.h"
#include "planner/planner_testlib.h"

namespace hspmd::planner {
namespace {

using ::testing::HasSubstr;

// Ranks 0-1 fast and 2-3 slow (3x), `small` bytes on ranks 0 and 1, `big` on 2 and 3.
resolve::Topology cluster(double small, double big) {
  std::string j = R"({"name": "mem", "devices": [)";
  for (int r = 0; r < 4; ++r) {
    j += (r ? "," : "") + std::string(R"({"id": )") + std::to_string(r) + R"(, "node": 0, "type": ")" +
         (r < 2 ? "fast" : "slow") + R"(", "memory": )" + std::to_string(r < 2 ? small : big) + R"(, "peak_flops": 1e11})";
  }
  j += R"(], "intra_node_bandwidth": 1e10, "inter_node_bandwidth": 1e9})";
  return resolve::Topology::from_json_text(j, "mem.json");
}

sharding::Strategy two_pipelines(const std::string& name = "two") {
  return sharding::Strategy::from_json_text(R"({"name": ")" + name + R"(", "pipelines": [
      {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-3"}]},
      {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2", "layers": "0-1"},
                                                                 {"ranks": "3", "layers": "2-3"}]}]})",
                                            name + ".json");
}

// The best step over every assignment of the sequences to pipelines that hold them.
double exhaustive_best(const std::vector<int64_t>& lengths, const std::vector<PipelineModel>& pipes) {
  const size_t n = lengths.size(), P = pipes.size();
  size_t total = 1;
  for (size_t i = 0; i < n; ++i) total *= P;
  double best = 1e300;
  for (size_t code = 0; code < total; ++code) {
    std::vector<std::vector<int64_t>> parts(P);
    size_t c = code;
    bool ok = true;
    for (size_t i = 0; i < n; ++i, c /= P) {
      ok = ok && lengths[i] <= pipes[c % P].max_tokens;
      parts[c % P].push_back(lengths[i]);
    }
    if (!ok) continue;
    double step = 0;
    for (size_t p = 0; p < P; ++p) step = std::max(step, dispatch(parts[p], std::span(&pipes[p], 1)).step_seconds);
    best = std::min(best, step);
  }
  return best;
}

TEST(DispatcherTest, PipelineModelReproducesTheCostModel) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = cluster(1e9, 1e9);
  const Profile profile = testing::two_kind_profile(3.0);
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 64});
  const std::vector<PipelineModel> pipes = pipeline_models(cm, two_pipelines(), {.seq_len = 64});
  const Prediction whole = cm.predict(two_pipelines());
  ASSERT_EQ(pipes.size(), 2u);
  // Two micro-batches of one 64-token sequence each: exactly the cost model's pipeline times.
  const std::vector<MicroBatchLoad> two{{64, 64 * 64}, {64, 64 * 64}};
  for (size_t p = 0; p < 2; ++p) {
    EXPECT_NEAR(pipes[p].seconds(two), whole.pipelines[p].pipeline_seconds, 1e-9 * whole.pipelines[p].pipeline_seconds);
    EXPECT_NEAR(pipes[p].tail_seconds, whole.pipelines[p].end_seconds - whole.pipelines[p].pipeline_seconds, 1e-12);
    EXPECT_EQ(pipes[p].micro_batch_tokens, 64);
  }
}

// Pipeline 0 on ranks 0-1 at TP 2 (sequence parallel or not), pipeline 1 on ranks 2 and 3, at ZeRO `zero`.
sharding::Strategy tp_pipelines(int zero, bool sequence_parallel) {
  const std::string sp = sequence_parallel ? "true" : "false";
  return sharding::Strategy::from_json_text(R"({"name": "tp", "zero": )" + std::to_string(zero) + R"(, "pipelines": [
      {"micro_batch_size": 1, "num_micro_batches": 2,
       "stages": [{"ranks": "0-1", "layers": "0-3", "sequence_parallel": )" + sp + R"(}]},
      {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2", "layers": "0-1"},
                                                                 {"ranks": "3", "layers": "2-3"}]}]})",
                                            "tp.json");
}

// The profile with TP 2 short of halving the fast kind's per-token work, so that sequence
// parallelism (which runs the TP-duplicated part on 1/t of the tokens) prices a faster layer.
Profile profile_with_duplicated_work() {
  Profile profile = testing::two_kind_profile(3.0);
  profile.devices.at("fast").tp.at(2).layer.c1 *= 1.25;
  return profile;
}

// Sequence parallelism, ZeRO-2 and ZeRO-3 and the gradient buckets' overlap, each on: equal
// micro-batches of one length cost exactly the cost model's pipeline time, and the tail is its
// sync and optimizer; and each term moves the pipeline model the way it moves the cost model.
TEST(DispatcherTest, PipelineModelPricesSequenceParallelismZeroAndOverlapAsTheCostModel) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = cluster(1e9, 1e9);
  const Profile profile = profile_with_duplicated_work();
  const std::vector<MicroBatchLoad> two{{64, 64 * 64}, {64, 64 * 64}};
  std::map<std::tuple<int, bool, double>, std::vector<PipelineModel>> models_of;
  for (const double bucket_mb : {0.0, 0.05}) {
    const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 64, .grad_bucket_mb = bucket_mb});
    for (int zero = 0; zero <= 3; ++zero) {
      for (const bool sp : {false, true}) {
        SCOPED_TRACE("ZeRO " + std::to_string(zero) + (sp ? ", SP" : "") + ", buckets of " + std::to_string(bucket_mb) +
                     " MiB");
        const sharding::Strategy st = tp_pipelines(zero, sp);
        const std::vector<PipelineModel> pipes = pipeline_models(cm, st, {.seq_len = 64});
        const Prediction whole = cm.predict(st);
        ASSERT_EQ(pipes.size(), 2u);
        for (size_t p = 0; p < 2; ++p) {
          const PipelinePrediction& pp = whole.pipelines[p];
          EXPECT_NEAR(pipes[p].seconds(two), pp.pipeline_seconds, 1e-9 * pp.pipeline_seconds) << "pipeline " << p;
          EXPECT_NEAR(pipes[p].tail_seconds, pp.end_seconds - pp.pipeline_seconds, 1e-12) << "pipeline " << p;
        }
        models_of[{zero, sp, bucket_mb}] = pipes;
      }
    }
  }
  const auto seconds = [&](int zero, bool sp, double bucket_mb, size_t p) {
    return models_of.at({zero, sp, bucket_mb})[p].seconds(two);
  };
  const auto tail = [&](int zero, bool sp, double bucket_mb, size_t p) {
    return models_of.at({zero, sp, bucket_mb})[p].tail_seconds;
  };
  // SP splits the fast kind's duplicated work; ZeRO-3 gathers the weights in every micro-batch.
  EXPECT_LT(seconds(1, true, 0, 0), seconds(1, false, 0, 0));
  EXPECT_GT(seconds(3, false, 0, 0), seconds(1, false, 0, 0));
  EXPECT_GT(seconds(3, false, 0, 1), seconds(1, false, 0, 1));
  // The buckets hide part of the sync behind the backward passes; ZeRO-3 has no sync to hide.
  for (int zero = 0; zero <= 2; ++zero) EXPECT_LT(tail(zero, false, 0.05, 1), tail(zero, false, 0, 1)) << zero;
  EXPECT_DOUBLE_EQ(tail(3, false, 0.05, 1), tail(3, false, 0, 1));
}

// The longest sequence a pipeline holds is the cost model's: its memory at that many tokens fits,
// one more does not; sequence parallelism and ZeRO-3 raise it, ZeRO-2 does not (see dispatcher.h).
TEST(DispatcherTest, MemoryLimitIsTheCostModelsWithSequenceParallelismAndZero3) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = cluster(12e6, 1e9);
  const Profile profile = testing::two_kind_profile(3.0);
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 512});
  std::map<std::pair<int, bool>, int64_t> limit;
  for (int zero : {1, 2, 3}) {
    for (const bool sp : {false, true}) {
      SCOPED_TRACE("ZeRO " + std::to_string(zero) + (sp ? ", SP" : ""));
      const sharding::Strategy st = tp_pipelines(zero, sp);
      const int64_t held = pipeline_models(cm, st, {.seq_len = 512})[0].max_tokens;
      ASSERT_GT(held, 16);
      ASSERT_LT(held, 1 << 20);
      limit[{zero, sp}] = held;
      // The cost model's memory of micro-batches of one sequence, as many in flight as the schedule keeps.
      sharding::Strategy single = st;
      for (sharding::PipelineSpec& pipe : single.pipelines) pipe.micro_batch_size = 1;
      const auto fits_rank0 = [&](int64_t tokens) {
        const RankPrediction& r = cm.at_seq_len(tokens).predict(single).ranks.at(0);
        return r.memory.total() <= r.capacity;
      };
      if (zero != 2) {
        EXPECT_TRUE(fits_rank0(held));
        EXPECT_FALSE(fits_rank0(held + 1));
      }
    }
  }
  const auto held = [&](int zero, bool sp) { return limit.at({zero, sp}); };
  EXPECT_GT(held(1, true), held(1, false));
  EXPECT_GT(held(3, false), held(1, false));
  EXPECT_GT(held(3, true), held(3, false));
  EXPECT_EQ(held(2, false), held(1, false));
}

TEST(DispatcherTest, BalancesTheSlowestPipelineNearTheExhaustiveOptimum) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = cluster(1e9, 1e9);
  const Profile profile = testing::two_kind_profile(3.0);
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 64});
  const std::vector<PipelineModel> pipes = pipeline_models(cm, two_pipelines(), {.seq_len = 64});
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> length(2, 64);
  double worst = 1;
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<int64_t> lengths(8);
    for (int64_t& l : lengths) l = length(rng);
    const Dispatch d = dispatch(lengths, pipes);
    // Every sequence exactly once.
    std::vector<size_t> seen;
    for (const auto& pipe : d.micro_batches)
      for (const auto& mb : pipe) seen.insert(seen.end(), mb.begin(), mb.end());
    std::sort(seen.begin(), seen.end());
    ASSERT_EQ(seen.size(), lengths.size());
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], i);
    worst = std::max(worst, d.step_seconds / exhaustive_best(lengths, pipes));
  }
  // The fast single-stage pipeline takes most of the work, and the result is close to the optimum.
  EXPECT_LT(worst, 1.05) << "dispatch's step over the exhaustive optimum, worst of 40 batches";
}

TEST(DispatcherTest, LongSequencesGoWhereTheMemoryHoldsThem) {
  const models::LlamaConfig config = testing::tiny_config();
  const Profile profile = testing::two_kind_profile(3.0);
  // Ranks 0-1 (the fast pipeline) hold little beyond the weights; 2-3 hold plenty.
  const resolve::Topology topo = cluster(18.5e6, 1e9);
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 512});
  const std::vector<PipelineModel> pipes = pipeline_models(cm, two_pipelines(), {.seq_len = 512});
  ASSERT_GT(pipes[0].max_tokens, 10);
  ASSERT_LT(pipes[0].max_tokens, 400);
  EXPECT_GT(pipes[1].max_tokens, 512);
  EXPECT_EQ(pipes[0].micro_batch_tokens, pipes[0].max_tokens);
  // Sequences just over pipeline 0's limit and short ones: the long ones must all go to pipeline 1,
  // though pipeline 0 is three times faster; every micro-batch fits its pipeline's memory.
  const int64_t over = pipes[0].max_tokens + 1;
  const std::vector<int64_t> lengths{over, 8, over, 16, 8, 12, over, 10};
  const Dispatch d = dispatch(lengths, pipes);
  for (size_t p = 0; p < 2; ++p) {
    for (const auto& mb : d.micro_batches[p]) {
      int64_t tokens = 0;
      for (size_t i : mb) {
        tokens += lengths[i];
        if (lengths[i] == over) {
          EXPECT_EQ(p, 1u) << "sequence " << i << " of " << over << " tokens";
        }
      }
      EXPECT_LE(tokens, pipes[p].micro_batch_tokens) << "pipeline " << p;
    }
  }
  EXPECT_FALSE(d.micro_batches[0].empty()) << "the short sequences still use the fast pipeline";
  EXPECT_THAT(d.to_string(), HasSubstr("pipeline 1: "));
}

TEST(DispatcherTest, RefusesASequenceLongerThanEveryPipelineHolds) {
  const models::LlamaConfig config = testing::tiny_config();
  const Profile profile = testing::two_kind_profile(3.0);
  const resolve::Topology topo = cluster(18.5e6, 10e6);
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 512});
  const std::vector<PipelineModel> pipes = pipeline_models(cm, two_pipelines(), {.seq_len = 512});
  const int64_t limit = std::max(pipes[0].max_tokens, pipes[1].max_tokens);
  ASSERT_LT(limit, 512);
  const std::vector<int64_t> lengths{16, limit + 5, 30};
  try {
    dispatch(lengths, pipes);
    FAIL() << "a sequence of " << limit + 5 << " tokens was dispatched";
  } catch (const SequenceTooLong& e) {
    EXPECT_THAT(e.what(), HasSubstr("sequence 1 of the batch has " + std::to_string(limit + 5) + " tokens"));
    EXPECT_THAT(e.what(), HasSubstr("the limit is " + std::to_string(limit) + " tokens"));
  }
  EXPECT_NO_THROW(dispatch(std::vector<int64_t>{limit, 3}, pipes));
}

TEST(DispatcherTest, StrategiesPerMaximumLengthCountTheSwitch) {
  const models::LlamaConfig config = testing::tiny_config();
  const Profile profile = testing::two_kind_profile(3.0);
  const resolve::Topology topo = cluster(1e9, 1e9);
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 64});
  // "short": the slow ranks alone (max length 32); "long": both pipelines above (max length 64).
  const sharding::Strategy short_one = sharding::Strategy::from_json_text(R"({"name": "short", "pipelines": [
      {"micro_batch_size": 1, "num_micro_batches": 1, "stages": [{"ranks": "2-3", "layers": "0-3"}]}]})", "s.json");
  const LengthStrategies set(models::Llama(config), cm, {{32, short_one}, {64, two_pipelines("long")}},
                             {.seq_len = 64});
  EXPECT_GT(set.switch_bytes(0, 1), 0);
  EXPECT_GT(set.switch_seconds(0, 1), 0);
  EXPECT_EQ(set.switch_seconds(1, 1), 0);
  // A batch with a 60-token sequence only fits "long".
  const Choice c = set.choose(std::vector<int64_t>{60, 20, 10}, 0);
  EXPECT_EQ(c.strategy, 1u);
  EXPECT_LT(c.predicted[0], 0);
  EXPECT_NEAR(c.predicted[1], c.dispatch.step_seconds + set.switch_seconds(0, 1), 1e-12);
  // Short batches: "long" (with the fast rank) is quicker per step; from "long" it stays there.
  const std::vector<int64_t> short_batch{20, 20, 10, 12};
  const Choice stay = set.choose(short_batch, 1);
  EXPECT_EQ(stay.strategy, 1u);
  EXPECT_EQ(stay.switch_seconds, 0);
  // From "short", going to "long" must pay the switch; the choice is whichever total is lower.
  const Choice from_short = set.choose(short_batch, 0);
  const double go = dispatch(short_batch, set.pipelines(1)).step_seconds + set.switch_seconds(0, 1);
  const double keep = dispatch(short_batch, set.pipelines(0)).step_seconds;
  EXPECT_EQ(from_short.strategy, go < keep ? 1u : 0u);
  // Longer than every maximum length: refused with the length and the largest limit.
  try {
    set.choose(std::vector<int64_t>{65}, 0);
    FAIL() << "a 65-token sequence was accepted";
  } catch (const SequenceTooLong& e) {
    EXPECT_THAT(e.what(), HasSubstr("a sequence of 65 tokens"));
    EXPECT_THAT(e.what(), HasSubstr("the largest maximum length is 64"));
  }
}

// bf16-only switches with "short" holding the state: "long" pays its two per-step moves (bf16
// parameters out, float32 gradients back) whatever ran before, "short" nothing even from "long".
TEST(DispatcherTest, Bf16OnlySwitchesPriceEveryStepAwayFromTheBase) {
  const models::LlamaConfig config = testing::tiny_config();
  const Profile profile = testing::two_kind_profile(3.0);
  const resolve::Topology topo = cluster(1e9, 1e9);
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 64});
  const sharding::Strategy short_one = sharding::Strategy::from_json_text(R"({"name": "short", "pipelines": [
      {"micro_batch_size": 1, "num_micro_batches": 1, "stages": [{"ranks": "2-3", "layers": "0-3"}]}]})", "s.json");
  LengthStrategies set(models::Llama(config), cm, {{32, short_one}, {64, two_pipelines("long")}}, {.seq_len = 64});
  set.price_bf16_switches(0);
  EXPECT_EQ(set.bf16_step_seconds(0), 0);
  EXPECT_GT(set.bf16_step_seconds(1), 0);
  // Half the parameters' bytes out and the gradients back cost less than the full switch's three copies.
  EXPECT_LT(set.bf16_step_seconds(1), set.switch_seconds(0, 1));
  const std::vector<int64_t> short_batch{20, 20, 10, 12};
  for (size_t current : {size_t{0}, size_t{1}}) {
    const Choice c = set.choose(short_batch, current);
    EXPECT_NEAR(c.predicted[0], dispatch(short_batch, set.pipelines(0)).step_seconds, 1e-12) << "from " << current;
    EXPECT_NEAR(c.predicted[1], dispatch(short_batch, set.pipelines(1)).step_seconds + set.bf16_step_seconds(1), 1e-12)
        << "from " << current;
  }
}

}  // namespace
}  // namespace hspmd::planner

