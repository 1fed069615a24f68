// The planner's bounds on a pipeline's time (planner/pipeline_floor.h) and the search's bounds built
// on them: a configuration is dropped when its bound reaches the best plan, so no bound may exceed
// what it bounds. Checked against enumeration of every split and every count assignment, and on
// real searches (a 64-GPU generated cluster): the candidates come in the order of their bounds
// (the shapes' bounds stay below their candidates'), and every candidate's bound and level 2's
// relaxation stay below the step the cost model predicts for its solution.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "hspmd/models/llama.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/planner/cluster_generator.h"
#include "hspmd/planner/layer_programs.h"
#include "hspmd/planner/pipeline_floor.h"
#include "hspmd/planner/pipeline_search.h"

namespace hspmd::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const std::string kRoot = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();

// Every stage of the classes on its own: (t, h, cap, tail_t, tail_h).
std::vector<StageClass> stages_of(const std::vector<StageClass>& classes) {
  std::vector<StageClass> out;
  for (const StageClass& c : classes) {
    for (int i = 0; i < c.stages; ++i) out.push_back({1, c.t, c.h, c.cap, c.tail_t, c.tail_h});
  }
  return out;
}

// The least over every split (each stage 1..cap layers, summing to `layers`) of
// sum f + (n - 1) max f + max tail.
double least_over_splits(const std::vector<StageClass>& classes, int layers, int n) {
  const std::vector<StageClass> st = stages_of(classes);
  double best = kInf;
  std::vector<int> x(st.size());
  std::function<void(size_t, int)> go = [&](size_t j, int left) {
    if (j + 1 == st.size()) {
      if (left < 1 || left > st[j].cap) return;
      x[j] = left;
      double sum = 0, most = 0, tail = 0;
      for (size_t i = 0; i < st.size(); ++i) {
        const double f = st[i].t * x[i] + st[i].h;
        sum += f;
        most = std::max(most, f);
        tail = std::max(tail, st[i].tail_t * x[i] + st[i].tail_h);
      }
      best = std::min(best, sum + (n - 1) * most + tail);
      return;
    }
    for (int v = 1; v <= st[j].cap && v < left; ++v) {
      x[j] = v;
      go(j + 1, left - v);
    }
  };
  if (!st.empty()) go(0, layers);
  return best;
}

std::vector<StageClass> random_classes(std::mt19937& rng, bool tails) {
  std::uniform_int_distribution<int> count(1, 2), cap(1, 7), kinds(1, 3);
  std::uniform_real_distribution<double> t(0.5, 4.0), h(0.0, 2.0), q(0.0, 1.5);
  std::vector<StageClass> out;
  const int k = kinds(rng);
  for (int i = 0; i < k; ++i) {
    out.push_back({count(rng), t(rng), h(rng), cap(rng), tails ? q(rng) : 0.0, tails ? h(rng) / 2 : 0.0});
  }
  return out;
}

// Without tails the floor is the least over the splits exactly, for every count; with tails (their
// bottleneck found at a subset of the bottlenecks) it is never above it.
TEST(PipelineFloorTest, FloorIsTheLeastOverEverySplitAndNeverAbove) {
  std::mt19937 rng(31);
  int exact = 0, bounded = 0;
  for (int round = 0; round < 400; ++round) {
    const bool tails = round % 2 == 1;
    const std::vector<StageClass> classes = random_classes(rng, tails);
    const int layers = 4 + round % 6;
    const PipelineFloor floor(classes, layers);
    for (int n = 1; n <= 6; ++n) {
      const double truth = least_over_splits(classes, layers, n);
      if (truth == kInf) {
        EXPECT_FALSE(floor.fits()) << "round " << round;
        continue;
      }
      ASSERT_TRUE(floor.fits()) << "round " << round;
      EXPECT_LE(floor.at(n), truth * (1 + 1e-12)) << "round " << round << " n " << n;
      if (!tails) {
        EXPECT_NEAR(floor.at(n), truth, 1e-9 * truth) << "round " << round << " n " << n;
        ++exact;
      }
      ++bounded;
      // The most micro-batches within the floor's own time is at least n.
      EXPECT_GE(floor.most_within(floor.at(n)), n);
    }
  }
  EXPECT_GT(exact, 300);
  EXPECT_GT(bounded, 600);
}

TEST(PipelineFloorTest, LeastBottleneckIsTheLeastOverEverySplit) {
  std::mt19937 rng(7);
  for (int round = 0; round < 300; ++round) {
    const std::vector<StageClass> classes = random_classes(rng, false);
    const int layers = 3 + round % 7;
    // The bottleneck alone: n large enough that it dominates, less the sum's share.
    const std::vector<StageClass> st = stages_of(classes);
    double truth = kInf;
    std::vector<int> x(st.size());
    std::function<void(size_t, int)> go = [&](size_t j, int left) {
      if (j + 1 == st.size()) {
        if (left < 1 || left > st[j].cap) return;
        double most = st[j].t * left + st[j].h;
        for (size_t i = 0; i < j; ++i) most = std::max(most, st[i].t * x[i] + st[i].h);
        truth = std::min(truth, most);
        return;
      }
      for (int v = 1; v <= st[j].cap && v < left; ++v) {
        x[j] = v;
        go(j + 1, left - v);
      }
    };
    go(0, layers);
    const double found = least_bottleneck(classes, layers);
    if (truth == kInf) {
      EXPECT_EQ(found, kInf) << "round " << round;
    } else {
      EXPECT_NEAR(found, truth, 1e-9 * truth) << "round " << round;
    }
  }
}

// least_step is the least over every count assignment (each pipeline at least one micro-batch,
// sum w n >= the batch) of the slowest pipeline's floor: checked by enumeration, and so never above
// the step of an assignment that takes the batch exactly.
TEST(PipelineFloorTest, LeastStepIsTheLeastOverEveryCountAssignment) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> pipes(1, 3), size(1, 2), batch(3, 14);
  for (int round = 0; round < 200; ++round) {
    std::vector<PipelineFloor> floors;
    std::vector<int64_t> w;
    const int P = pipes(rng);
    for (int p = 0; p < P; ++p) {
      std::vector<StageClass> classes = random_classes(rng, round % 2 == 1);
      for (StageClass& c : classes) c.cap = 8;  // every floor fits: at most 6 stages
      floors.emplace_back(classes, 8);
      w.push_back(size(rng));
    }
    const int64_t B = batch(rng);
    std::vector<std::pair<const PipelineFloor*, int64_t>> weighted;
    for (int p = 0; p < P; ++p) weighted.push_back({&floors[p], w[p]});
    const double found = least_step(weighted, B);
    double truth = kInf;
    std::vector<int> n(P, 1);
    std::function<void(int)> go = [&](int p) {
      if (p == P) {
        int64_t taken = 0;
        double slowest = 0;
        for (int q = 0; q < P; ++q) {
          taken += w[q] * n[q];
          slowest = std::max(slowest, floors[q].at(n[q]));
        }
        if (taken >= B) truth = std::min(truth, slowest);
        return;
      }
      for (n[p] = 1; n[p] <= B; ++n[p]) go(p + 1);
    };
    go(0);
    EXPECT_NEAR(found, truth, 1e-9 * truth) << "round " << round;
  }
}

// On a generated 64-GPU cluster (3/8 H800, 5/8 H20, Llama 32B, the shipped profile), with ZeRO-1,
// ZeRO-2 and ZeRO-3: the search hands out its candidates by ascending bound, so no shape's bound
// (real-valued or integer, shape_integer_bound) was above a candidate it expanded to; and for the
// first candidates, the candidate's bound, level 2's relaxation (solve() not dropping it when
// asked to prune at its solution's predicted step) and its solution's floor are at most the
// predicted step of its solution.
TEST(PipelineFloorTest, SearchBoundsStayBelowTheirCandidatesAndPredictedSteps) {
  const resolve::Topology paper = resolve::Topology::from_file(kRoot + "/examples/clusters/paper-16h800-32h20.json");
  const resolve::Topology topo =
      resolve::Topology::from_json_text(cluster_json(recipe_like(paper, {{"H800", 24}, {"H20", 40}})), "gen.json");
  const models::LlamaConfig config = models::LlamaConfig::from_file(kRoot + "/configs/llama-32b.json");
  const Profile profile = Profile::from_file(kRoot + "/examples/profiles/paper-h800-h20-llama-32b.json");
  std::vector<int> all(topo.num_devices());
  for (int r = 0; r < topo.num_devices(); ++r) all[r] = r;
  for (int zero : {1, 2, 3}) {
    PlannerOptions o;
    o.global_batch = 64;
    o.seq_len = 4096;
    o.zero2 = zero == 2;
    o.zero3 = zero == 3;
    const CostModel cost(models::Llama(config), topo, profile, {.seq_len = o.seq_len});
    PipelineSearch search(cost, o, all);
    LayerPrograms programs(cost, o);
    programs.ring_bound = ring_link_bound(cost, all);
    double last = 0;
    int checked = 0, taken = 0;
    while (const std::optional<Candidate> c = search.next(kInf)) {
      EXPECT_GE(c->bound, last * (1 - 1e-12)) << "ZeRO-" << zero << ": candidate " << taken << " out of order";
      last = c->bound;
      if (++taken > 3000) break;
      if (taken % 10 != 0) continue;
      const std::optional<sharding::Strategy> st = programs.solve(*c);
      if (!st) continue;
      const Prediction p = cost.predict(*st);
      EXPECT_LE(c->bound, p.step_seconds * (1 + 1e-12)) << "ZeRO-" << zero << ": " << to_string(p);
      EXPECT_LE(programs.solution_floor(), p.step_seconds * (1 + 1e-12))
          << "ZeRO-" << zero << ": level 2's solution floor above its predicted step: " << to_string(p);
      const int pruned = programs.relaxation_pruned();
      EXPECT_TRUE(programs.solve(*c, p.step_seconds * (1 + 1e-9)).has_value())
          << "ZeRO-" << zero << ": level 2's relaxation above its own solution's predicted step";
      EXPECT_EQ(programs.relaxation_pruned(), pruned);
      ++checked;
    }
    EXPECT_GT(taken, 100) << "ZeRO-" << zero;
    EXPECT_GT(checked, 5) << "ZeRO-" << zero;
  }
}

}  // namespace
}  // namespace hspmd::planner
