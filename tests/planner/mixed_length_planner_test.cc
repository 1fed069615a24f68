// The mixed-length planner: on a fast and a slow node, a long-tailed length distribution gets
// pipelines per length interval covering the lengths in order, strategies per maximum length that
// the dispatch accepts, and lengths no method holds are refused with the length. Its objective is
// the dispatcher's pipeline model, and its dynamic program finds the optimum of its space (several
// methods per interval: TP, CP and PP degrees, micro-batch sizes, sequence parallelism and ZeRO-1
// over copies) that exhaustive enumeration finds. Sequence parallelism and ZeRO-1 are chosen where
// only they hold the longest sequence.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <iostream>
#include <limits>
#include <random>
#include <set>

#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/planner/cost_model.h"
#include "hspmd/planner/dispatcher.h"
#include "hspmd/planner/mixed_length_planner.h"
#include "planner/planner_testlib.h"

namespace hspmd::planner {
namespace {

using ::testing::HasSubstr;

std::vector<std::pair<int64_t, uint64_t>> long_tail() {
  // Many short segments, fewer long ones, up to 256 tokens.
  return {{4, 400}, {8, 300}, {16, 200}, {32, 120}, {64, 60}, {128, 20}, {256, 6}};
}

TEST(MixedLengthPlannerTest, IntervalsMethodsAndStrategiesPerMaximumLength) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = testing::two_kind_cluster(4, 4, 1e9);
  const Profile profile = testing::two_kind_profile(3.0);
  const MixedLengthPlan plan =
      plan_mixed_length(models::Llama(config), topo, profile, long_tail(),
                        {.seq_len = 256, .global_batch_tokens = 4096});
  std::cout << plan.to_string();  // for the log
  ASSERT_FALSE(plan.intervals.empty());
  EXPECT_NO_THROW(plan.heterogeneous.validate(config.num_hidden_layers));
  EXPECT_NO_THROW(models::compile_llama_plan(config, plan.heterogeneous));
  EXPECT_LE(plan.heterogeneous.ranks().size(), 8u);
  // Intervals cover the lengths in order.
  EXPECT_EQ(plan.intervals.front().low, 4);
  EXPECT_EQ(plan.intervals.back().high, 257);
  for (size_t i = 1; i < plan.intervals.size(); ++i) EXPECT_EQ(plan.intervals[i].low, plan.intervals[i - 1].high);
  EXPECT_GT(plan.predicted_seconds, 0);
  for (const MixedLengthInterval& i : plan.intervals) {
    EXPECT_LE(i.seconds, plan.predicted_seconds * (1 + 1e-12));
    // Each interval's work is shared out whole.
    double shares = 0;
    for (size_t k = 0; k < i.pipelines.size(); ++k) shares += i.pipelines[k].copies * i.shares[k];
    EXPECT_NEAR(shares, 1.0, 1e-9);
  }
  // Strategies per maximum length: increasing, the last for the whole context, each priced by the
  // length-strategy set (which also checks every pipeline fits the model).
  ASSERT_FALSE(plan.per_max_length.empty());
  EXPECT_EQ(plan.per_max_length.back().max_len, 256);
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 256});
  const LengthStrategies set(models::Llama(config), cm, plan.per_max_length, {.seq_len = 256});
  const Choice c = set.choose(std::vector<int64_t>{200, 30, 8, 8, 4}, 0);
  EXPECT_GE(set.at(c.strategy).max_len, 200);
  EXPECT_THAT(plan.to_string(), HasSubstr("lengths [4, "));
}

TEST(MixedLengthPlannerTest, RefusesLengthsNoMethodHolds) {
  const models::LlamaConfig config = testing::tiny_config();
  // 17 MB per device: the weights fit, long sequences' activations do not.
  const resolve::Topology topo = testing::two_kind_cluster(2, 2, 17.0e6);
  const Profile profile = testing::two_kind_profile(3.0);
  try {
    plan_mixed_length(models::Llama(config), topo, profile, {{8, 10}, {100000, 1}},
                      {.seq_len = 100000, .global_batch_tokens = 200000});
    FAIL() << "a 100000-token segment was planned for";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("holds the segments of up to 100000 tokens"));
  }
}

// The interval time is the dispatcher's pipeline model: one pipeline taking a whole interval of k
// micro-batches' worth runs k equal micro-batches plus its sync; two copies take half each and
// finish in the time of half the work.
TEST(MixedLengthPlannerTest, IntervalTimeIsTheDispatchersPipelineModel) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = testing::two_kind_cluster(4, 2, 1e9);
  const Profile profile = testing::two_kind_profile(3.0);
  // Only segments of 64 tokens: bucket 6, [64, 128); 1,024 of them a step of 65,536 tokens.
  const MixedLengthSpace space(models::Llama(config), topo, profile, {{64, 10}},
                               {.seq_len = 256, .global_batch_tokens = 65536});
  const LengthLoad& load = space.load(6, 7);
  ASSERT_NEAR(load.tokens, 65536, 1e-6);
  int checked = 0;
  for (int m = 0; m < static_cast<int>(space.methods().size()); ++m) {
    const ParallelMethod& method = space.methods()[m];
    const PipelineModel& pm = method.model;
    if (pm.micro_batch_tokens % 64 != 0 || 65536 % pm.micro_batch_tokens != 0) continue;
    const int64_t k = 65536 / pm.micro_batch_tokens;
    const double per = static_cast<double>(pm.micro_batch_tokens);
    const std::vector<MicroBatchLoad> whole(k, {per, per * 64});
    const std::vector<MicroBatchLoad> half(k / 2, {per, per * 64});
    EXPECT_NEAR(space.interval_seconds(6, 7, {{m, 1}}), pm.seconds(whole) + pm.tail_seconds, 1e-9) << method.to_string();
    std::vector<double> shares;
    EXPECT_NEAR(space.interval_seconds(6, 7, {{m, 2}}, &shares), pm.seconds(half) + pm.tail_seconds, 1e-9)
        << method.to_string();
    EXPECT_NEAR(shares.at(0), 0.5, 1e-9);
    EXPECT_EQ(space.micro_batches(m, 6, 7, 0.5), k / 2);
    ++checked;
  }
  EXPECT_GT(checked, 10);
}

// The longest sequence the one-pipeline methods hold on `topo`: over those without a feature and
// over those with it (`has`).
template <typename Has>
std::pair<int64_t, int64_t> longest_held(const models::LlamaConfig& config, const resolve::Topology& topo,
                                         const Profile& profile, const Has& has) {
  const MixedLengthOptions probe{
      .seq_len = 1 << 20, .global_batch_tokens = 1 << 20, .cp_degrees = {1}, .pipeline_degrees = {1}};
  const MixedLengthSpace space(models::Llama(config), topo, profile, {{1 << 20, 1}}, probe);
  int64_t without = 0, with = 0;
  for (const ParallelMethod& m : space.methods()) {
    int64_t& longest = has(m) ? with : without;
    longest = std::max(longest, m.model.max_tokens);
  }
  return {without, with};
}

// A long sequence that fits a pipeline only with its optimizer states sharded over its copies
// (ZeRO-1, as the homogeneous DP x TP x PP baselines run): the planner must find that layout
// instead of refusing the length (or, on the paper's 32 H20, choosing a slower method that fits
// without ZeRO-1), and the strategy it writes must be ZeRO-1 so the dispatcher holds the sequence.
TEST(MixedLengthPlannerTest, ShardsOptimizerStatesWhenOnlyZero1HoldsTheLongestSequence) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = testing::two_kind_cluster(4, 0, 30e6);
  const Profile profile = testing::two_kind_profile(3.0);
  const auto [without, with] = longest_held(config, topo, profile, [](const ParallelMethod& m) {
    return m.zero1_copies > 1;
  });
  std::cout << "longest held without ZeRO-1 " << without << ", with " << with << "\n";
  ASSERT_GT(with, without + 1) << "the case needs a length only ZeRO-1 holds";
  const int64_t longest = without + 1;
  const std::vector<std::pair<int64_t, uint64_t>> lengths = {{16, 200}, {longest, 2}};
  const MixedLengthOptions options{
      .seq_len = longest, .global_batch_tokens = 4 * longest, .cp_degrees = {1}, .pipeline_degrees = {1}};
  const MixedLengthPlan plan = plan_mixed_length(models::Llama(config), topo, profile, lengths, options);
  std::cout << plan.to_string();
  EXPECT_EQ(plan.heterogeneous.zero, 1);
  EXPECT_GE(plan.heterogeneous.pipelines.size(), 2u);
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = longest});
  const std::vector<PipelineModel> pipes = pipeline_models(cm, plan.heterogeneous, {.seq_len = longest});
  EXPECT_NO_THROW(dispatch(std::vector<int64_t>{longest, 16, 16}, pipes));
}

// A long sequence that only sequence parallelism holds (its TP stages keep the activations between
// the TP blocks for 1/t of the tokens): without SP's methods no method holds it, with them the
// planner writes "sequence_parallel" on the stages of the pipeline that takes it, and the dispatcher
// holds it there. Two tokens shorter, the methods without SP hold it and are exactly as fast (this
// profile's TP halves every per-token cost, so SP saves no work, and its collectives move the same
// bytes; micro-batches of one row, so SP's memory packs no larger ones): no stage is written with SP.
TEST(MixedLengthPlannerTest, ChoosesSequenceParallelismWhereOnlyItHoldsTheLongestSequence) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = testing::two_kind_cluster(2, 0, 30e6);
  const Profile profile = testing::two_kind_profile(3.0);
  const auto [without, with] = longest_held(config, topo, profile, [](const ParallelMethod& m) {
    return m.sequence_parallel;
  });
  std::cout << "longest held without SP " << without << ", with " << with << "\n";
  const auto options = [](int64_t longest, bool sp) {
    return MixedLengthOptions{.seq_len = longest,
                              .global_batch_tokens = 4 * longest,
                              .micro_batch_sizes = {1},
                              .cp_degrees = {1},
                              .pipeline_degrees = {1},
                              .sequence_parallel = sp};
  };
  const auto has_sp = [](const sharding::Strategy& st) {
    for (const sharding::PipelineSpec& pipe : st.pipelines) {
      for (const sharding::StageSpec& s : pipe.stages) {
        if (s.sequence_parallel) return true;
      }
    }
    return false;
  };
  // Even lengths: SP at TP 2 splits whole rows of seq_len tokens.
  const int64_t longest = without + 1 + (without + 1) % 2, held = without - without % 2;
  ASSERT_LE(longest, with) << "the case needs a length only SP holds";
  const auto plan_for = [&](int64_t l, bool sp) {
    return plan_mixed_length(models::Llama(config), topo, profile, {{16, 200}, {l, 2}}, options(l, sp));
  };
  EXPECT_THROW(plan_for(longest, false), Error);
  const MixedLengthPlan plan = plan_for(longest, true);
  std::cout << plan.to_string();
  EXPECT_TRUE(has_sp(plan.heterogeneous));
  EXPECT_THAT(plan.to_string(), HasSubstr("sequence parallel"));
  EXPECT_NO_THROW(models::compile_llama_plan(config, plan.heterogeneous));
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = longest});
  const std::vector<PipelineModel> pipes = pipeline_models(cm, plan.heterogeneous, {.seq_len = longest});
  EXPECT_NO_THROW(dispatch(std::vector<int64_t>{longest, 16, 16}, pipes));

  const MixedLengthPlan plain = plan_for(held, false), either = plan_for(held, true);
  std::cout << either.to_string();
  EXPECT_FALSE(has_sp(either.heterogeneous));
  EXPECT_EQ(either.predicted_seconds, plain.predicted_seconds);
}

// The least step over the whole space, by enumeration: every grouping of the non-empty buckets
// into consecutive intervals (intervals that differ only by empty buckets carry the same work),
// and for each interval every set of pipelines of at most methods_per_interval methods holding
// its longest sequence, any copies (at least a ZeRO-1 method's own), within the devices of each kind.
double exhaustive_best(const MixedLengthSpace& space, int64_t* plans) {
  std::vector<int> filled;
  for (int b = 0; b < space.buckets(); ++b) {
    if (space.load(b, b + 1).tokens > 0) filled.push_back(b);
  }
  const int n_methods = static_cast<int>(space.methods().size());
  std::vector<int> used(space.kinds().size(), 0);
  double best = std::numeric_limits<double>::infinity();
  // Interval from filled[i] on; `worst`: the slowest interval so far.
  std::function<void(size_t, double)> intervals = [&](size_t i, double worst) {
    if (i == filled.size()) {
      ++*plans;
      best = std::min(best, worst);
      return;
    }
    for (size_t e = i; e < filled.size(); ++e) {
      const int from = filled[i], to = filled[e] + 1;
      std::vector<MethodCopies> pick;
      std::function<void(int)> pipelines = [&](int first) {
        if (!pick.empty()) intervals(e + 1, std::max(worst, space.interval_seconds(from, to, pick)));
        if (static_cast<int>(pick.size()) == space.options().methods_per_interval) return;
        for (int m = first; m < n_methods; ++m) {
          const ParallelMethod& method = space.methods()[m];
          if (!space.holds(m, from, to)) continue;
          for (int copies = space.min_copies(m);
               used[method.kind_index] + copies * method.devices() <= space.kind_devices(method.kind_index);
               ++copies) {
            used[method.kind_index] += copies * method.devices();
            pick.push_back({m, copies});
            pipelines(m + 1);
            pick.pop_back();
            used[method.kind_index] -= copies * method.devices();
          }
        }
      };
      pipelines(0);
    }
  };
  intervals(0, 0.0);
  return best;
}

struct OptimalityCase {
  const char* name;
  int fast, slow;
  double memory;
  std::vector<std::pair<int64_t, uint64_t>> lengths;
  int64_t seq_len, global_batch_tokens;
};

TEST(MixedLengthPlannerTest, DynamicProgramMatchesExhaustiveEnumeration) {
  const models::LlamaConfig config = testing::tiny_config();
  const Profile profile = testing::two_kind_profile(3.0);
  std::vector<OptimalityCase> cases = {
      {"2 fast + 2 slow, short to 1,024 tokens", 2, 2, 1e9, {{16, 600}, {100, 80}, {1000, 6}}, 1024, 16384},
      {"4 fast + 2 slow, 8,192-token tail, 60 MB devices", 4, 2, 60e6, {{64, 400}, {600, 30}, {8000, 2}}, 8192, 65536},
      {"2 fast + 4 slow, one length", 2, 4, 1e9, {{200, 100}}, 256, 8192},
      {"4 fast + 4 slow, 40 MB devices, four lengths to 3,000", 4, 4, 40e6, {{16, 2000}, {100, 200}, {1000, 20}, {3000, 3}}, 4096, 65536},
      {"4 fast + 4 slow, 1 GB devices, four lengths to 3,000", 4, 4, 1e9, {{16, 2000}, {100, 200}, {1000, 20}, {3000, 3}}, 4096, 65536},
      {"6 fast + 2 slow, 45 MB devices, 4,000-token tail", 6, 2, 45e6, {{64, 3000}, {4000, 40}}, 4096, 262144},
  };
  // And clusters, memories and length mixes drawn at random (a fixed seed: the same cases every run).
  std::mt19937 random(31);
  const auto draw = [&](std::vector<int64_t> from) { return from[random() % from.size()]; };
  for (int k = 0; k < 24; ++k) {
    const int fast = static_cast<int>(draw({2, 4, 6})), slow = static_cast<int>(draw({0, 2}));
    std::set<int64_t> picked;
    const int n_lengths = static_cast<int>(draw({1, 2, 3}));
    while (static_cast<int>(picked.size()) < n_lengths) picked.insert(draw({16, 64, 200, 500, 1000, 2000, 4000}));
    std::vector<std::pair<int64_t, uint64_t>> lengths;
    for (int64_t l : picked) lengths.push_back({l, static_cast<uint64_t>(draw({1, 10, 100, 3000}))});
    cases.push_back({"random", fast, slow, static_cast<double>(draw({40, 45, 50, 60, 1000})) * 1e6, lengths, 4096,
                     draw({16384, 262144})});
  }
  int checked = 0, with_sequence_parallel = 0;  // cases whose space has sequence-parallel methods
  for (const OptimalityCase& c : cases) {
    SCOPED_TRACE(c.name);
    const resolve::Topology topo = testing::two_kind_cluster(c.fast, c.slow, c.memory);
    const MixedLengthOptions options{.seq_len = c.seq_len,
                                     .global_batch_tokens = c.global_batch_tokens,
                                     .micro_batch_sizes = {1, 2},
                                     .cp_degrees = {1, 2},
                                     .pipeline_degrees = {1, 2}};
    const MixedLengthSpace space(models::Llama(config), topo, profile, c.lengths, options);
    bool held = false;
    for (int m = 0; m < static_cast<int>(space.methods().size()); ++m) held = held || space.holds(m, 0, space.buckets());
    if (!held) {
      EXPECT_STREQ(c.name, "random") << "no method holds the longest sequence";
      continue;  // a random case with too little memory for its longest sequence
    }
    ++checked;
    for (const ParallelMethod& m : space.methods()) {
      if (m.sequence_parallel) {
        ++with_sequence_parallel;
        break;
      }
    }
    int64_t plans = 0;
    const double best = exhaustive_best(space, &plans);
    const MixedLengthPlan plan = plan_mixed_length(models::Llama(config), topo, profile, c.lengths, options);
    std::cout << c.name << ": " << space.methods().size() << " methods, " << plans << " plans enumerated, best "
              << best << " s\n"
              << plan.to_string();
    ASSERT_TRUE(std::isfinite(best));
    EXPECT_NEAR(plan.predicted_seconds, best, 1e-9 * best);
    // The plan is what it says: its intervals' times, recomputed, give its step.
    double worst = 0;
    for (const MixedLengthInterval& i : plan.intervals) worst = std::max(worst, i.seconds);
    EXPECT_NEAR(worst, plan.predicted_seconds, 1e-12 * best);
    EXPECT_NO_THROW(models::compile_llama_plan(config, plan.heterogeneous));
  }
  EXPECT_GE(checked, 20);
  EXPECT_GE(with_sequence_parallel, checked / 2);
}

}  // namespace
}  // namespace hspmd::planner
