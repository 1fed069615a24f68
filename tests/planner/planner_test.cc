// The planner against exhaustive enumeration on small clusters (two device kinds, <= 8 devices):
// every strategy of the planner's space (per kind its devices cut into TP groups of one degree or
// of two, or idle; any number of pipelines; every even spread of each kind's and degree's groups;
// every order of those classes; EVERY division of the global batch
// over the pipelines with EVERY micro-batch size per pipeline; EVERY layer split of every
// pipeline) is priced by the cost model,
// and the planner's plan must be the cheapest that fits. Then memory limits, the refusal of a
// model that cannot fit, and re-planning after losing or gaining devices.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>

#include "hspmd/core/error.h"
#include "hspmd/models/llama.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/planner/derived_profile.h"
#include "hspmd/planner/planner.h"
#include "hspmd/specialize/exec_graph.h"
#include "hspmd/specialize/gather_units.h"
#include "hspmd/specialize/pipeline_layout.h"
#include "hspmd/specialize/schedule.h"
#include "hspmd/switching/switch_plan.h"
#include "planner/planner_testlib.h"

namespace hspmd::planner {
namespace {

using ::testing::HasSubstr;
using testing::tiny_config;
using testing::two_kind_cluster;
using testing::two_kind_profile;

const std::string kRoot = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();

// All compositions of `total` into `parts` positive integers.
void compositions(int total, int parts, std::vector<int>& cur, const std::function<void(const std::vector<int>&)>& f) {
  if (parts == 1) {
    cur.push_back(total);
    f(cur);
    cur.pop_back();
    return;
  }
  for (int first = 1; first <= total - (parts - 1); ++first) {
    cur.push_back(first);
    compositions(total - first, parts - 1, cur, f);
    cur.pop_back();
  }
}

struct Brute {
  double best = std::numeric_limits<double>::infinity();
  int strategies = 0;
};

// Whether the runtime runs `st` under ZeRO-3 with `kind`, written from its documented conditions
// (docs/memory.md): every pipeline runs as many micro-batches, and the holders of each layer, of the
// embedding (every first stage) and of the head (every last stage) run their passes in one order.
bool zero3_runs(const sharding::Strategy& st, specialize::ScheduleKind kind = specialize::ScheduleKind::k1F1B) {
  const int n = st.pipelines.front().num_micro_batches;
  auto passes = [&](const sharding::PipelineSpec& p, size_t j) {
    return specialize::make_schedule(kind, n, static_cast<int>(p.stages.size()), static_cast<int>(j));
  };
  const sharding::PipelineSpec& a = st.pipelines.front();
  for (const sharding::PipelineSpec& p : st.pipelines) {
    if (p.num_micro_batches != n || passes(p, 0) != passes(a, 0) ||
        passes(p, p.stages.size() - 1) != passes(a, a.stages.size() - 1)) {
      return false;
    }
    for (size_t j = 0; j < p.stages.size(); ++j) {
      for (int l = p.stages[j].first_layer; l <= p.stages[j].last_layer; ++l) {
        size_t k = 0;
        while (a.stages[k].last_layer < l) ++k;
        if (passes(p, j) != passes(a, k)) return false;
      }
    }
  }
  return true;
}

// Exhaustive search over the planner's documented space, written independently of the planner.
// `every_setting`: each strategy also under ZeRO-2 and ZeRO-3 (where the runtime runs it) and with
// sequence parallelism on its TP stages.
Brute exhaustive(const models::LlamaConfig& config, const resolve::Topology& topo, const CostModel& cost,
                 int64_t global_batch, bool zero1, bool every_setting = false) {
  const int L = static_cast<int>(config.num_hidden_layers);
  std::map<std::string, std::vector<int>> ranks_of;  // one node per kind in these clusters
  for (int r = 0; r < topo.num_devices(); ++r) ranks_of[topo.device(r).type].push_back(r);
  std::vector<std::string> kinds;
  for (const auto& [k, _] : ranks_of) kinds.push_back(k);
  Brute out;
  // Per kind, the ways to cut its devices (one node) into TP groups of the profiled degrees 1 and 2:
  // idle, all TP 1, all TP 2, or k TP-2 groups then TP-1 groups.
  std::map<std::string, std::vector<std::vector<std::vector<int>>>> cuts;
  for (const std::string& k : kinds) {
    const std::vector<int>& r = ranks_of[k];
    const int n = static_cast<int>(r.size());
    cuts[k].push_back({});
    for (int twos = 0; 2 * twos <= n; ++twos) {
      std::vector<std::vector<int>> cut;
      for (int i = 0; i < n;) {
        const int t = i < 2 * twos ? 2 : 1;
        cut.push_back(std::vector<int>(r.begin() + i, r.begin() + i + t));
        i += t;
      }
      cuts[k].push_back(cut);
    }
  }
  for (const auto& fast_cut : cuts[kinds[0]]) {
    for (const auto& slow_cut : cuts[kinds[1]]) {
      // Classes: the groups of one kind and one TP degree, each spread evenly over the pipelines.
      std::map<std::string, std::vector<std::vector<int>>> groups;
      for (const auto* cut : {&fast_cut, &slow_cut}) {
        for (const auto& g : *cut) groups[topo.device(g.front()).type + "/" + std::to_string(g.size())].push_back(g);
      }
      std::vector<std::string> used;
      int G = 0;
      for (const auto& [cls, g] : groups) {
        used.push_back(cls);
        G += static_cast<int>(g.size());
      }
      if (used.empty()) continue;
      for (int D = 1; D <= G; ++D) {
        // Per class, every vector of per-pipeline counts in {G_k / D, G_k / D + 1} summing to G_k.
        std::vector<std::map<std::string, std::vector<int>>> spreads{{}};
        for (const std::string& k : used) {
          const int Gk = static_cast<int>(groups[k].size());
          std::vector<std::map<std::string, std::vector<int>>> next;
          for (int mask = 0; mask < (1 << D); ++mask) {
            std::vector<int> c(D);
            int sum = 0;
            for (int p = 0; p < D; ++p) sum += c[p] = Gk / D + ((mask >> p) & 1);
            if (sum != Gk) continue;
            for (auto m : spreads) {
              m[k] = c;
              next.push_back(m);
            }
          }
          spreads = next;
        }
        for (const auto& count : spreads) {
          std::vector<std::string> order = used;
          do {
            std::vector<std::vector<std::vector<int>>> pipes(D);
            std::map<std::string, size_t> used_groups;
            bool ok = true;
            for (int p = 0; p < D; ++p) {
              for (const std::string& k : order) {
                for (int i = 0; i < count.at(k)[p]; ++i) pipes[p].push_back(groups[k][used_groups[k]++]);
              }
              ok = ok && !pipes[p].empty() && static_cast<int>(pipes[p].size()) <= L;
            }
            if (!ok) continue;
            // Every layer split of every pipeline.
            std::vector<std::vector<std::vector<int>>> splits(D);
            for (int p = 0; p < D; ++p) {
              std::vector<int> cur;
              compositions(L, static_cast<int>(pipes[p].size()), cur,
                           [&](const std::vector<int>& c) { splits[p].push_back(c); });
            }
            // Every division of the global batch's sequences over the pipelines, and per pipeline
            // every micro-batch size (a power of two up to 8 dividing the global batch and its share).
            std::vector<int> cur;
            compositions(static_cast<int>(global_batch), D, cur, [&](const std::vector<int>& share) {
              std::vector<std::vector<int>> sizes(D);
              for (int p = 0; p < D; ++p) {
                for (int b = 1; b <= 8; b *= 2) {
                  if (global_batch % b == 0 && share[p] % b == 0) sizes[p].push_back(b);
                }
              }
              std::vector<size_t> size_pick(D, 0);
              while (true) {
                std::vector<size_t> pick(D, 0);
                while (true) {
                  sharding::Strategy st;
                  st.zero = zero1 ? 1 : 0;
                  for (int p = 0; p < D; ++p) {
                    sharding::PipelineSpec pipe;
                    pipe.micro_batch_size = sizes[p][size_pick[p]];
                    pipe.num_micro_batches = share[p] / pipe.micro_batch_size;
                    int layer = 0;
                    for (size_t j = 0; j < pipes[p].size(); ++j) {
                      const int x = splits[p][pick[p]][j];
                      pipe.stages.push_back({pipes[p][j], layer, layer + x - 1});
                      layer += x;
                    }
                    st.pipelines.push_back(pipe);
                  }
                  for (int zero : every_setting && zero1 ? std::vector<int>{1, 2, 3} : std::vector<int>{st.zero}) {
                    for (bool sp : every_setting ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
                      if (zero == 3 && !zero3_runs(st)) continue;
                      sharding::Strategy variant = st;
                      variant.zero = zero;
                      for (auto& pipe : variant.pipelines) {
                        for (auto& stage : pipe.stages) {
                          stage.sequence_parallel = sp && stage.tp() > 1;
                        }
                      }
                      const Prediction pr = cost.predict(variant);
                      ++out.strategies;
                      if (pr.fits) out.best = std::min(out.best, pr.step_seconds);
                    }
                  }
                  int p = 0;
                  while (p < D && ++pick[p] == splits[p].size()) pick[p++] = 0;
                  if (p == D) break;
                }
                int p = 0;
                while (p < D && ++size_pick[p] == sizes[p].size()) size_pick[p++] = 0;
                if (p == D) break;
              }
            });
          } while (std::next_permutation(order.begin(), order.end()));
        }
      }
    }
  }
  return out;
}

struct Case {
  int fast, slow;
  double slowdown;
  double memory;  // bytes per device
  bool every_setting = false;  // enumerate ZeRO-2/3 and sequence parallelism too
  // Seconds per token a TP-2 layer spends on work TP does not split (norms...): SP saves half of it.
  double duplicated_per_token = 0;
};

// two_kind_profile(slowdown) whose TP-2 layers do `duplicated` seconds per token that TP 1 does
// too: c1(2) = c1(1) / 2 + duplicated / 2 more than the even split.
Profile with_duplicated_work(Profile p, double duplicated) {
  for (auto& [kind, k] : p.devices) {
    const double whole = k.tp.at(1).layer.c1;
    k.tp.at(2).layer.c1 = (whole - duplicated) / 2 + duplicated;
  }
  return p;
}

class PlannerExhaustiveTest : public ::testing::TestWithParam<Case> {};

TEST_P(PlannerExhaustiveTest, PlanIsTheCheapestValidStrategy) {
  const Case c = GetParam();
  const models::LlamaConfig config = tiny_config();
  const resolve::Topology topo = two_kind_cluster(c.fast, c.slow, c.memory);
  const Profile profile = with_duplicated_work(two_kind_profile(c.slowdown), c.duplicated_per_token);
  PlannerOptions o;
  o.global_batch = 8;
  o.seq_len = 64;
  const Planner planner(models::Llama(config), topo, profile, o);
  const Brute brute = exhaustive(config, topo, planner.cost_model(), o.global_batch, o.zero1, c.every_setting);
  ASSERT_LT(brute.best, std::numeric_limits<double>::infinity()) << "no strategy fits: the case is mis-sized";
  const Plan plan = planner.plan();
  plan.strategy.validate(4);
  EXPECT_TRUE(plan.prediction.fits);
  EXPECT_NEAR(plan.prediction.step_seconds, brute.best, 1e-9 * brute.best)
      << "planner " << plan.prediction.step_seconds << " s vs the best of " << brute.strategies
      << " enumerated strategies " << brute.best << " s\n"
      << describe_plan(plan);
  // The priced plan is what the cost model says of the written strategy.
  EXPECT_DOUBLE_EQ(planner.cost_model().predict(plan.strategy).step_seconds, plan.prediction.step_seconds);
  models::compile_llama_plan(config, plan.strategy);  // the runtime accepts it
}

INSTANTIATE_TEST_SUITE_P(TwoKinds, PlannerExhaustiveTest,
                         ::testing::Values(Case{2, 2, 3.0, 1e9, true},     // 4 devices
                                           Case{2, 4, 3.0, 1e9},           // 6 devices, slow ones worth using
                                           Case{2, 4, 40.0, 1e9},          // slow ones hardly worth it
                                           Case{2, 2, 3.0, 9.5e6, true},   // memory binds: no stage holds 4 layers
                                           Case{4, 2, 2.0, 1e9},           // 6 devices, fast ones mixing TP 1 and 2
                                           Case{2, 2, 3.0, 4.3e6, true},   // memory binds harder (near the ZeRO-2/3 plans' least)
                                           Case{2, 2, 3.0, 1e9, true, 4e-6}));  // SP is faster on TP stages
// (8 devices, 4 + 4, no longer fits the test's time: the enlarged space's enumeration ran > 10 min.)

TEST(PlannerMemoryTest, LimitsAreRespectedAndChangeThePlan) {
  const models::LlamaConfig config = tiny_config();
  const Profile profile = two_kind_profile();
  PlannerOptions o;
  o.global_batch = 8;
  o.seq_len = 64;
  const resolve::Topology roomy = two_kind_cluster(2, 2, 1e9);
  const Plan free_plan = Planner(models::Llama(config), roomy, profile, o).plan();
  double most = 0;
  for (const RankPrediction& r : free_plan.prediction.ranks) most = std::max(most, r.memory.total());
  // Give every device less than the unconstrained plan needs somewhere.
  const double capacity = 0.9 * most;
  const resolve::Topology tight = two_kind_cluster(2, 2, capacity);
  const Plan plan = Planner(models::Llama(config), tight, profile, o).plan();
  ASSERT_TRUE(plan.prediction.fits) << describe_plan(plan);
  for (const RankPrediction& r : plan.prediction.ranks) {
    EXPECT_LE(r.memory.total(), capacity) << describe_memory(r);
  }
  EXPECT_NE(plan.strategy.pipelines, free_plan.strategy.pipelines);
  EXPECT_GE(plan.prediction.step_seconds, free_plan.prediction.step_seconds);
}

TEST(PlannerMemoryTest, ModelThatCannotFitIsRefusedWithTheFigures) {
  const Profile profile = two_kind_profile();
  PlannerOptions o;
  o.global_batch = 8;
  o.seq_len = 64;
  const resolve::Topology tiny = two_kind_cluster(2, 2, 2e6);  // 2 MB a device
  try {
    Planner(models::Llama(tiny_config()), tiny, profile, o).plan();
    FAIL() << "a 4-layer model with 3.7 MB of states per layer fitted in 4 x 2 MB";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_THAT(what, HasSubstr("no plan fits in memory"));
    EXPECT_THAT(what, HasSubstr("billion parameters"));
    EXPECT_THAT(what, HasSubstr("the devices have 7.63 MiB in all, the largest 1.91 MiB"));
  }
}

// What a plan buys with memory is needed: its sequence-parallel stages without SP, and its ZeRO-2 or
// ZeRO-3 strategy one stage lower, do not fit or are slower.
void expect_only_what_is_needed(const Plan& plan, const CostModel& cm) {
  sharding::Strategy sp_off = plan.strategy;
  for (auto& pipe : sp_off.pipelines) {
    for (auto& stage : pipe.stages) stage.sequence_parallel = false;
  }
  if (sp_off.pipelines != plan.strategy.pipelines) {
    const Prediction p = cm.predict(sp_off);
    EXPECT_TRUE(!p.fits || p.step_seconds > plan.prediction.step_seconds) << "SP not needed\n" << describe_plan(plan);
  }
  if (plan.strategy.zero >= 2) {
    sharding::Strategy lower = plan.strategy;
    --lower.zero;
    const Prediction p = cm.predict(lower);
    EXPECT_TRUE(!p.fits || p.step_seconds > plan.prediction.step_seconds)
        << "ZeRO-" << plan.strategy.zero << " not needed\n" << describe_plan(plan);
  }
}

// The least memory per device (2% steps from 2 MB) some plan fits in under `o` on `fast` + `slow`
// devices, and that plan.
std::pair<double, Plan> least_memory_plan(const Profile& profile, const PlannerOptions& o, int fast = 2, int slow = 2,
                                          const models::LlamaConfig& config = tiny_config()) {
  for (double memory = 2e6; memory < 1e8; memory *= 1.02) {
    try {
      return {memory, Planner(models::Llama(config), two_kind_cluster(fast, slow, memory), profile, o).plan()};
    } catch (const Error& e) {
      EXPECT_THAT(std::string(e.what()), HasSubstr("no plan fits in memory"));
    }
  }
  ADD_FAILURE() << "no plan fits in 100 MB a device";
  return {0, Plan{}};
}

TEST(PlannerMemoryTest, SequenceParallelismAndZeroStagesOnlyWhereMemoryNeedsThem) {
  const Profile profile = two_kind_profile();
  PlannerOptions all;
  all.global_batch = 8;
  all.seq_len = 64;
  PlannerOptions zero1_only = all, with_sp = all, up_to_zero2 = all;
  zero1_only.search_sequence_parallel = false;
  zero1_only.zero2_when_tight = zero1_only.zero3_when_tight = false;
  with_sp.zero2_when_tight = with_sp.zero3_when_tight = false;
  up_to_zero2.zero3_when_tight = false;
  const auto [m1, plan1] = least_memory_plan(profile, zero1_only);
  const auto [m_sp, plan_sp] = least_memory_plan(profile, with_sp);
  const auto [m2, plan2] = least_memory_plan(profile, up_to_zero2);
  const auto [m3, plan3] = least_memory_plan(profile, all);
  // Each setting fits in less memory than the one before (ZeRO-2 saves at most a micro-batch's
  // transient values, so not always a 2% step).
  EXPECT_LT(m_sp, m1);
  EXPECT_LE(m2, m_sp);
  EXPECT_LT(m3, m2);
  EXPECT_EQ(plan1.strategy.zero, 1);
  EXPECT_EQ(plan3.strategy.zero, 3) << describe_plan(plan3);

  bool sp = false;
  for (const auto& pipe : plan_sp.strategy.pipelines) {
    for (const auto& stage : pipe.stages) sp = sp || stage.sequence_parallel;
  }
  EXPECT_TRUE(sp) << describe_plan(plan_sp);
  for (const auto& [memory, plan] : {std::pair{m_sp, plan_sp}, {m2, plan2}, {m3, plan3}}) {
    const resolve::Topology topo = two_kind_cluster(2, 2, memory);
    expect_only_what_is_needed(plan, CostModel(models::Llama(tiny_config()), topo, profile, {.seq_len = 64}));
  }
  // At the least memory for ZeRO-1 without SP, every setting allowed: a plan no slower.
  const resolve::Topology at_m1 = two_kind_cluster(2, 2, m1);
  const Plan any = Planner(models::Llama(tiny_config()), at_m1, profile, all).plan();
  EXPECT_LE(any.prediction.step_seconds, plan1.prediction.step_seconds);
  expect_only_what_is_needed(any, CostModel(models::Llama(tiny_config()), at_m1, profile, {.seq_len = 64}));
  // With room: ZeRO-1 and no SP (SP is no faster on this profile: TP 2 halves all of a layer's work).
  const Plan roomy = Planner(models::Llama(tiny_config()), two_kind_cluster(2, 2, 1e9), profile, all).plan();
  EXPECT_EQ(roomy.strategy.zero, 1);
  for (const auto& pipe : roomy.strategy.pipelines) {
    for (const auto& stage : pipe.stages) EXPECT_FALSE(stage.sequence_parallel) << describe_plan(roomy);
  }
}

TEST(PlannerMemoryTest, SequenceParallelismIsChosenWhereItIsFaster) {
  // TP 2 layers that duplicate 4 us of each token's work: SP halves that on every TP stage.
  Profile profile = two_kind_profile();
  for (auto& [kind, k] : profile.devices) k.tp.at(2).layer.c1 = (k.tp.at(1).layer.c1 - 4e-6) / 2 + 4e-6;
  PlannerOptions o;
  o.global_batch = 8;
  o.seq_len = 64;
  o.tp_per_kind = {{"fast", 2}, {"slow", 2}};
  const resolve::Topology topo = two_kind_cluster(2, 2, 1e9);
  const Plan plan = Planner(models::Llama(tiny_config()), topo, profile, o).plan();
  for (const auto& pipe : plan.strategy.pipelines) {
    for (const auto& stage : pipe.stages) EXPECT_TRUE(stage.sequence_parallel) << describe_plan(plan);
  }
  EXPECT_THAT(describe_plan(plan), HasSubstr("TP2 SP"));
  expect_only_what_is_needed(plan, CostModel(models::Llama(tiny_config()), topo, profile, {.seq_len = 64}));
  models::compile_llama_plan(tiny_config(), plan.strategy);  // the runtime accepts it
  o.search_sequence_parallel = false;
  const Plan without = Planner(models::Llama(tiny_config()), topo, profile, o).plan();
  EXPECT_LT(plan.prediction.step_seconds, without.prediction.step_seconds);
}

// Re-planning on the paper's 48-GPU cluster after losing H800 rank 15, from Table 9's strategy.
// The runtime's checks of a strategy as a run makes them when it specializes the plan
// (runtime/plan_cache.cc): the strategy compiles (under ZeRO-3: equal micro-batch counts), and under
// ZeRO-3 the holders of every parameter, in the pipelines found in the annotated graph, run their
// passes in lockstep under `kind`. Throws Error naming the parameter otherwise.
void runtime_specializes(const models::LlamaConfig& config, const sharding::Strategy& st,
                         specialize::ScheduleKind kind) {
  const sharding::AnnotationPlan plan = models::compile_llama_plan(config, st);
  if (!st.shards_parameters()) return;
  const models::LlamaModel model = models::build_llama(config);
  const specialize::ExecGraph exec(model.graph, plan, st.ranks().front());
  const specialize::PipelineLayout pipelines = specialize::build_pipeline_layout(model.graph, exec.deduced());
  for (const switching::ParamLayout& layout :
       switching::param_layouts(plan, models::parameter_shapes(models::Llama(config)))) {
    specialize::check_passes_in_lockstep(pipelines, kind, st.pipelines.front().num_micro_batches, layout.name,
                                         layout.read.devices());
  }
}

bool pipelines_differ_in_shape(const sharding::Strategy& st) {
  const sharding::PipelineSpec& a = st.pipelines.front();
  for (const sharding::PipelineSpec& p : st.pipelines) {
    if (p.stages.size() != a.stages.size()) return true;
    for (size_t j = 0; j < p.stages.size(); ++j) {
      if (p.stages[j].tp() != a.stages[j].tp() || p.stages[j].first_layer != a.stages[j].first_layer) return true;
    }
  }
  return false;
}

// On 2 fast + 3 slow devices, the least memory some plan fits in is that of a ZeRO-3 plan over
// pipelines of different shapes, which the runtime specializes; below ZeRO-3 nothing fits there.
struct HeterogeneousZero3Case {
  int layers;
  std::map<std::string, int> tp_per_kind;
  int64_t global_batch;
};

class PlannerHeterogeneousZero3Test : public ::testing::TestWithParam<HeterogeneousZero3Case> {};

TEST_P(PlannerHeterogeneousZero3Test, LeastMemoryPlanIsZero3AndTheRuntimeSpecializesIt) {
  const HeterogeneousZero3Case c = GetParam();
  models::LlamaConfig config = tiny_config();
  config.num_hidden_layers = c.layers;
  const Profile profile = two_kind_profile();
  PlannerOptions o;
  o.global_batch = c.global_batch;
  o.seq_len = 64;
  o.tp_per_kind = c.tp_per_kind;
  // Gradients reduced after the backward pass: ZeRO-3 then holds one full gradient at a time, not
  // two (one reduced on the communication thread while B computes the next). With two, the tiny
  // model's embedding gradient on a TP-1 rank outweighs what sharding saves, and ZeRO-2 fits first.
  o.grad_bucket_mb = 0;
  const auto [memory, plan] = least_memory_plan(profile, o, 2, 3, config);
  ASSERT_EQ(plan.strategy.zero, 3) << describe_plan(plan);
  EXPECT_TRUE(pipelines_differ_in_shape(plan.strategy)) << describe_plan(plan);
  EXPECT_NO_THROW(runtime_specializes(config, plan.strategy, specialize::ScheduleKind::k1F1B)) << describe_plan(plan);
  PlannerOptions up_to_zero2 = o;
  up_to_zero2.zero3_when_tight = false;
  EXPECT_THROW(Planner(models::Llama(config), two_kind_cluster(2, 3, memory), profile, up_to_zero2).plan(), Error);
}

INSTANTIATE_TEST_SUITE_P(
    TwoKinds, PlannerHeterogeneousZero3Test,
    ::testing::Values(
        // 2 layers cannot spread over the 4 TP groups: two 2-stage pipelines, one starting with the
        // TP-2 fast group, 4 micro-batches each.
        HeterogeneousZero3Case{2, {{"fast", 2}, {"slow", 1}}, 8},
        // A 2-stage beside a 3-stage pipeline, 2 micro-batches each: under 1F1B the holders of each
        // layer still run one order (the first stages' warm-ups cover both micro-batches).
        HeterogeneousZero3Case{4, {{"fast", 1}, {"slow", 1}}, 4}));

// 4 layers on 2 fast + 3 slow devices of TP 1, 8 sequences: at the least memory GPipe needs, its
// plan is ZeRO-3 over a 2-stage and a 3-stage pipeline of 4 micro-batches each, which the runtime
// runs under GPipe; under 1F1B their first stages run their passes in different orders (their
// warm-ups differ), so the runtime refuses it there, and the 1F1B planner writes a plan the runtime
// specializes, at that memory and above.
TEST(PlannerZero3Test, NoZero3WhereHoldersRunTheirPassesInDifferentOrders) {
  models::LlamaConfig config = tiny_config();
  config.num_hidden_layers = 4;
  const Profile profile = two_kind_profile();
  PlannerOptions o;
  o.global_batch = 8;
  o.seq_len = 64;
  o.tp_per_kind = {{"fast", 1}, {"slow", 1}};
  o.schedule = specialize::ScheduleKind::kGPipe;
  const auto [least, gpipe] = least_memory_plan(profile, o, 2, 3, config);
  const auto& pipes = gpipe.strategy.pipelines;
  ASSERT_EQ(gpipe.strategy.zero, 3) << describe_plan(gpipe);
  ASSERT_TRUE(std::any_of(pipes.begin(), pipes.end(), [&](const sharding::PipelineSpec& p) {
    return p.stages.size() != pipes.front().stages.size();
  })) << describe_plan(gpipe);
  EXPECT_NO_THROW(runtime_specializes(config, gpipe.strategy, specialize::ScheduleKind::kGPipe));
  EXPECT_THROW(runtime_specializes(config, gpipe.strategy, specialize::ScheduleKind::k1F1B), Error);
  o.schedule = specialize::ScheduleKind::k1F1B;
  for (double m = least; m < 1.5 * least; m *= 1.05) {
    const Plan plan = Planner(models::Llama(config), two_kind_cluster(2, 3, m), profile, o).plan();
    EXPECT_NO_THROW(runtime_specializes(config, plan.strategy, specialize::ScheduleKind::k1F1B)) << describe_plan(plan);
  }
}

TEST(PlannerReplanTest, AfterALossEverySurvivorIsUsedOrDeliberatelyIdle) {
  const models::LlamaConfig config = models::LlamaConfig::from_file(kRoot + "/configs/llama-32b.json");
  const resolve::Topology topo = resolve::Topology::from_file(kRoot + "/examples/clusters/paper-16h800-32h20.json");
  const Profile profile = derive_profile(models::Llama(config), topo, {});
  const sharding::Strategy previous =
      sharding::Strategy::from_file(kRoot + "/examples/strategies/table9-32b-16h800-32h20.json");
  PlannerOptions o;
  o.global_batch = 64;
  o.seq_len = 4096;
  const Planner planner(models::Llama(config), topo, profile, o);
  std::vector<int> survivors;
  for (int r = 0; r < 48; ++r) {
    if (r != 15) survivors.push_back(r);
  }
  // Its time is bench_planner_bench's to measure (tests assert no timings: this one failed at
  // 1.006 s of CPU time on a loaded 2-core host).
  const Plan plan = planner.replan(previous, survivors);
  plan.strategy.validate(60);
  models::compile_llama_plan(config, plan.strategy);
  EXPECT_TRUE(plan.prediction.fits);
  const std::vector<int> used = plan.strategy.ranks();
  EXPECT_FALSE(std::binary_search(used.begin(), used.end(), 15)) << "the lost rank is in the new plan";
  for (int r : survivors) {
    const bool in_plan = std::binary_search(used.begin(), used.end(), r);
    const bool idle = std::any_of(plan.idle.begin(), plan.idle.end(), [&](const std::string& line) {
      return line.rfind("rank " + std::to_string(r) + " (", 0) == 0;
    });
    EXPECT_NE(in_plan, idle) << "rank " << r << " must be either used or listed idle with a reason";
  }
  EXPECT_EQ(used.size() + plan.idle.size(), survivors.size());
  // Against the fastest plan on the survivors with the previous TP degrees and micro-batch size
  // (the re-planner's space): at most the tolerance slower, and it moves no more state.
  PlannerOptions fresh = o;
  fresh.devices = survivors;
  fresh.micro_batch_sizes = {1};
  fresh.tp_per_kind = {{"H800", 4}, {"H20", 4}};
  const Plan fastest = Planner(models::Llama(config), topo, profile, fresh).plan();
  EXPECT_LE(plan.prediction.step_seconds, fastest.prediction.step_seconds * (1 + o.replan_tolerance) + 1e-9);
  EXPECT_LE(plan.moved_bytes, planner.moved_bytes(previous, fastest.strategy));
  EXPECT_GT(planner.moved_bytes(previous, plan.strategy), 0);
  EXPECT_DOUBLE_EQ(plan.moved_bytes, planner.moved_bytes(previous, plan.strategy));
}

TEST(PlannerReplanTest, AddedRanksAreUsedOrDeliberatelyIdle) {
  const models::LlamaConfig config = tiny_config();
  const resolve::Topology topo = two_kind_cluster(2, 4, 1e9);
  const Profile profile = two_kind_profile();
  PlannerOptions o;
  o.global_batch = 8;
  o.seq_len = 64;
  o.devices = {0, 1, 2, 3};
  const Planner small(models::Llama(config), topo, profile, o);
  const Plan before = small.plan();
  const Plan after = small.replan(before.strategy, {0, 1, 2, 3, 4, 5});
  after.strategy.validate(4);
  EXPECT_EQ(after.strategy.ranks().size() + after.idle.size(), 6u) << describe_plan(after);
  EXPECT_LE(after.prediction.step_seconds, before.prediction.step_seconds * (1 + o.replan_tolerance));
  // With the same ranks the previous plan is among the candidates: nothing needs to move.
  const Plan same = small.replan(before.strategy, {0, 1, 2, 3});
  EXPECT_EQ(same.moved_bytes, 0) << describe_plan(same);
}

TEST(PlannerTest, RejectsBadOptions) {
  const resolve::Topology topo = two_kind_cluster(2, 2, 1e9);
  const Profile profile = two_kind_profile();
  PlannerOptions odd;
  odd.global_batch = 8;
  odd.micro_batch_sizes = {3};
  EXPECT_THROW(Planner(models::Llama(tiny_config()), topo, profile, odd), Error);
  PlannerOptions outside;
  outside.global_batch = 8;
  outside.devices = {7};
  EXPECT_THROW(Planner(models::Llama(tiny_config()), topo, profile, outside), Error);
}

}  // namespace
}  // namespace hspmd::planner
