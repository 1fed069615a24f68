// The planner's floor on a level-2 solution (LayerPrograms::solution_floor): a solution whose
// floor is above the best plan is not priced, so the floor must never exceed what the cost model
// predicts for that solution.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "hspmd/models/llama.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/planner/layer_programs.h"
#include "hspmd/planner/pipeline_search.h"
#include "hspmd/planner/planner.h"
#include "planner/planner_testlib.h"

namespace hspmd::planner {
namespace {

using testing::tiny_config;
using testing::two_kind_cluster;
using testing::two_kind_profile;

const std::string kRoot = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();

// `st` with sequence parallelism on every TP stage, or on none.
sharding::Strategy with_sp(sharding::Strategy st, bool on) {
  for (sharding::PipelineSpec& pipe : st.pipelines) {
    for (sharding::StageSpec& s : pipe.stages) s.sequence_parallel = on && s.tp() > 1;
  }
  return st;
}

// The planner skips pricing a level-2 solution whose floor is above the best plan: the floor must
// be at most what the cost model predicts for it, with and without sequence parallelism, for every
// candidate (ZeRO-1 with gradient buckets and without, so that the sync's floor differs, and ZeRO-3,
// whose gathers run on each layer's holders): the first 200 candidates on a small two-kind cluster
// (also with CP 2 stages only), the first 40 on the paper's 48 GPUs.
TEST(PlannerFloorTest, SolutionFloorIsAtMostThePredictedStep) {
  const models::LlamaConfig tiny = tiny_config();
  const models::LlamaConfig c32 = models::LlamaConfig::from_file(kRoot + "/configs/llama-32b.json");
  const resolve::Topology small = two_kind_cluster(4, 2, 1e12);
  const resolve::Topology paper = resolve::Topology::from_file(kRoot + "/examples/clusters/paper-16h800-32h20.json");
  const Profile small_profile = two_kind_profile(2.0);
  const Profile paper_profile = Profile::from_file(kRoot + "/examples/profiles/paper-h800-h20-llama-32b.json");
  struct Case {
    const models::LlamaConfig& config;
    const resolve::Topology& topo;
    const Profile& profile;
    int64_t global_batch, seq_len;
    int most;
    std::vector<int> cp_degrees;  // empty: the planner's default for seq_len
  };
  // The CP case has one-pipeline candidates, whose gradient ring is the stage's own CP ranks.
  for (const Case& k : {Case{tiny, small, small_profile, 8, 64, 200, {}}, Case{tiny, small, small_profile, 2, 64, 200, {2}},
                        Case{c32, paper, paper_profile, 64, 4096, 40, {}}}) {
    for (auto [bucket_mb, zero3] : {std::pair{0.0, false}, std::pair{25.0, false}, std::pair{25.0, true}}) {
      PlannerOptions o;
      o.global_batch = k.global_batch;
      o.seq_len = k.seq_len;
      o.sequence_parallel = true;
      o.zero3 = zero3;
      o.cp_degrees = k.cp_degrees;
      const CostModel cost(models::Llama(k.config), k.topo, k.profile, {.seq_len = k.seq_len, .grad_bucket_mb = bucket_mb});
      std::vector<int> all(k.topo.num_devices());
      for (int r = 0; r < k.topo.num_devices(); ++r) all[r] = r;
      PipelineSearch search(cost, o, all);
      LayerPrograms programs(cost, o);
      programs.ring_bound = ring_link_bound(cost, all);
      int checked = 0, one_pipeline_cp = 0;
      for (int i = 0; i < k.most; ++i) {
        const std::optional<Candidate> c = search.next(std::numeric_limits<double>::infinity());
        if (!c) break;
        const std::optional<sharding::Strategy> st = programs.solve(*c);
        if (!st) continue;
        ++checked;
        one_pipeline_cp += c->pipelines.size() == 1 && c->pipelines[0][0].cp > 1;
        for (bool sp : {true, false}) {
          const Prediction p = cost.predict(with_sp(*st, sp));
          EXPECT_LE(programs.solution_floor(), p.step_seconds * (1 + 1e-12)) << "ZeRO-3 " << zero3 << ": " << to_string(p);
        }
        EXPECT_GT(programs.solution_floor(), 0);
      }
      EXPECT_GT(checked, 10) << "ZeRO-3 " << zero3;
      if (!k.cp_degrees.empty()) {
        EXPECT_GT(one_pipeline_cp, 0) << "ZeRO-3 " << zero3;
      }
    }
  }
}

}  // namespace
}  // namespace hspmd::planner
