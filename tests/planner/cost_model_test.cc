// The cost model on a hand-checked heterogeneous strategy: per-stage times, the pipeline bubble,
// gradient sync and memory per micro-batches in flight (1F1B vs GPipe).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hspmd/core/error.h"
#include "hspmd/planner/cost_model.h"
#include "planner/planner_testlib.h"

namespace hspmd::planner {
namespace {

using ::testing::HasSubstr;

sharding::Strategy hetero() {
  // Pipeline 0: TP 2 on the fast node, all 4 layers, 2 x 2 sequences. Pipeline 1: slow ranks 2 -> 3,
  // layers 0 | 1-3, 4 x 1 sequence.
  return sharding::Strategy::from_json_text(R"({"name": "h", "zero1": true, "pipelines": [
      {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
      {"micro_batch_size": 1, "num_micro_batches": 4,
       "stages": [{"ranks": "2", "layers": "0"}, {"ranks": "3", "layers": "1-3"}]}]})",
                                            "h.json");
}

TEST(CostModelTest, StageTimesBubbleAndSync) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = testing::two_kind_cluster(2, 2, 1e9);
  const Profile profile = testing::two_kind_profile(3.0);
  const CostModel cm(config, topo, profile, {.seq_len = 64});
  const Prediction p = cm.predict(hetero());
  ASSERT_EQ(p.pipelines.size(), 2u);

  const double s = 64;
  const TpProfile& f2 = profile.at("fast", 2);
  const TpProfile& s1 = profile.at("slow", 1);
  // Pipeline 1, stage 0: 1 slow layer + the send of 1 x 64 x 128 floats (and the gradient back)
  // over the intra-node link of node 1 (1e10 B/s); stage 1: 3 slow layers + the head.
  const double p2p = 2 * (64 * 128 * 4 / 1e10);
  const double st0 = s1.layer.seconds(1, s) + p2p;
  const double st1 = 3 * s1.layer.seconds(1, s) + s1.ends.seconds(s);
  EXPECT_NEAR(p.pipelines[1].pipeline_seconds, st0 + st1 + 3 * std::max(st0, st1), 1e-12);
  // Pipeline 0: one stage: 4 layers + head + 4 TP all-reduces per layer of 2 x 64 x 128 floats,
  // ring of 2 on the intra-node link (1e10 B/s): 2 (n-1)/n bytes / bandwidth each; one more for the
  // embedding and one for the head, and the loss's gather of 3 float64 per token.
  const double ar = 2.0 * 1 / 2 * (2 * 64 * 128 * 4) / 1e10;
  const double loss_gather = 2.0 * 1 / 2 * (2 * 64 * 3 * 8) / 1e10;
  const double f0 = 4 * f2.layer.seconds(2, s) + f2.ends.seconds(2 * s) + (4 * 4 + 2) * ar + loss_gather;
  EXPECT_NEAR(p.pipelines[0].pipeline_seconds, 2 * f0, 1e-12);
  // Gradient sync runs after the pipeline: the step is the slowest end.
  EXPECT_GT(p.pipelines[1].end_seconds, p.pipelines[1].pipeline_seconds);
  EXPECT_DOUBLE_EQ(p.step_seconds, std::max(p.pipelines[0].end_seconds, p.pipelines[1].end_seconds));
  EXPECT_EQ(p.pipelines[1].stages[0].kind, "slow");
  EXPECT_THAT(to_string(p), HasSubstr("predicted step time: "));
}

TEST(CostModelTest, MemoryFollowsMicroBatchesInFlight) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = testing::two_kind_cluster(2, 2, 1e9);
  const Profile profile = testing::two_kind_profile();
  const CostModel one_f_one_b(config, topo, profile, {.seq_len = 64});
  const CostModel gpipe(config, topo, profile, {.seq_len = 64, .schedule = specialize::ScheduleKind::kGPipe});
  const Prediction a = one_f_one_b.predict(hetero()), b = gpipe.predict(hetero());
  // Rank 2: first of 2 stages, 4 micro-batches: 1F1B keeps 2 in flight, GPipe 4.
  const ActivationFit& act = profile.at("slow", 1).activations;
  const double keep = 1 * act.keep_per_token * 64;
  EXPECT_NEAR(a.ranks[2].memory.activations, 2 * keep + act.transient_per_token * 64, 1e-9);
  EXPECT_NEAR(b.ranks[2].memory.activations, 4 * keep + act.transient_per_token * 64, 1e-9);
  // ZeRO-1 over 2 pipelines halves the optimizer states.
  const double params = ModelShape::of(config).layer_parameters + ModelShape::of(config).embedding_parameters;
  EXPECT_NEAR(a.ranks[2].memory.zero_states, params * 12 / 2, 1e-6);
  EXPECT_TRUE(a.fits);
  const resolve::Topology small = testing::two_kind_cluster(2, 2, 4e6);
  const Prediction c = CostModel(config, small, profile, {.seq_len = 64}).predict(hetero());
  EXPECT_FALSE(c.fits);
  ASSERT_FALSE(c.overflows.empty());
  EXPECT_THAT(c.overflows.front(), HasSubstr("of 3.81 MiB"));
}

// A stage's parameters: its layers, the embedding on the first stage, the head on the last; any
// split of the layers into stages counts every parameter of the model once.
TEST(CostModelTest, StageParametersCoverTheModelOnce) {
  const models::LlamaConfig config = testing::tiny_config();  // 4 layers
  const ModelShape m = ModelShape::of(config);
  const double total = static_cast<double>(config.num_parameters());
  EXPECT_EQ(m.stage_parameters(4, true, true), total);
  const double split = m.stage_parameters(1, true, false) + m.stage_parameters(2, false, false) +
                      m.stage_parameters(1, false, true);
  EXPECT_EQ(split, total);
  EXPECT_EQ(m.stage_parameters(2, false, false), 2 * m.layer_parameters);
  EXPECT_GT(m.stage_parameters(0, true, false), 0);  // a stage of the embedding alone
}

TEST(CostModelTest, UnknownKindOrRankIsAnError) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = testing::two_kind_cluster(2, 2, 1e9);
  Profile profile = testing::two_kind_profile();
  profile.devices.erase("slow");
  const CostModel cm(config, topo, profile, {.seq_len = 64});
  EXPECT_THROW(cm.predict(hetero()), Error);
  const Profile full = testing::two_kind_profile();
  const CostModel cm2(config, testing::two_kind_cluster(1, 1, 1e9), full, {.seq_len = 64});
  EXPECT_THROW(cm2.predict(hetero()), Error);
}

}  // namespace
}  // namespace hspmd::planner
