// The cost model's prices of sequence parallelism's compute, ZeRO-3 and the gradient buckets'
// overlap, each against a hand computation on the tiny model and the hand-made two-kind profile,
// and its memory against the runtime's own estimate (specialize/memory_estimate.h) of every rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "hspmd/models/llama_model.h"
#include "hspmd/planner/cost_model.h"
#include "hspmd/planner/memory_fit.h"
#include "hspmd/specialize/exec_graph.h"
#include "hspmd/specialize/memory_estimate.h"
#include "planner/planner_testlib.h"

namespace hspmd::planner {
namespace {

using ::testing::HasSubstr;

sharding::Strategy parse(const std::string& json) { return sharding::Strategy::from_json_text(json, "s.json"); }

TEST(CostModelTermsTest, SequenceParallelRunsTheWorkTpDuplicatesOnItsShareOfTheTokens) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = testing::two_kind_cluster(2, 2, 1e9);
  // Per token, 12 us of work TP splits and 2 us it does not (norms, residual adds): 14 us at TP 1,
  // 12 / 2 + 2 = 8 us at TP 2.
  Profile profile = testing::two_kind_profile();
  profile.devices.at("fast").tp.at(2).layer.c1 = 8e-6;
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 64});
  EXPECT_NEAR(cm.duplicated_per_token("fast", 2), 2e-6, 1e-18);
  EXPECT_EQ(cm.duplicated_per_token("fast", 1), 0);
  auto tp2 = [&](bool sp) {
    return cm.predict(parse(std::string(R"({"name": "tp2", "pipelines": [{"micro_batch_size": 2,
        "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3", "sequence_parallel": )") +
                            (sp ? "true" : "false") + "}]}]}"));
  };
  // With SP each TP rank does the 2 us of 64 of the 128 tokens, in each of the 4 layers.
  const double saved = 4 * 2e-6 * (2 * 64) / 2;
  EXPECT_NEAR(tp2(false).pipelines[0].stages[0].compute_seconds - tp2(true).pipelines[0].stages[0].compute_seconds,
              saved, 1e-15);
  EXPECT_LT(tp2(true).step_seconds, tp2(false).step_seconds);
}

// Two data-parallel pipelines of two stages (fast 0 -> 1, slow 2 -> 3), 4 micro-batches of 1.
sharding::Strategy dp2_pp2(int zero) {
  return parse(R"({"name": "dp2pp2", "zero": )" + std::to_string(zero) + R"(, "pipelines": [
      {"micro_batch_size": 1, "num_micro_batches": 4, "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1", "layers": "2-3"}]},
      {"micro_batch_size": 1, "num_micro_batches": 4, "stages": [{"ranks": "2", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}]})");
}

TEST(CostModelTermsTest, ZeroThreeShardsTheWeightsAndGathersEveryUnitInEachPass) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = testing::two_kind_cluster(2, 2, 1e9);
  const Profile profile = testing::two_kind_profile();
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 64});
  const ModelShape m = ModelShape::of(models::Llama(config));
  const Prediction z2 = cm.predict(dp2_pp2(2)), z3 = cm.predict(dp2_pp2(3));
  EXPECT_TRUE(z3.parameters_sharded);
  EXPECT_EQ(z3.gradient_groups, 0);
  EXPECT_THAT(to_string(z3), HasSubstr("ZeRO-3: per micro-batch"));
  EXPECT_THAT(to_string(z3), HasSubstr("s ZeRO-3 gathers"));

  // Communication of stage 0 (ranks 0 and 2: a ring of 2 over the 1e9 B/s inter-node link, no
  // latency): per micro-batch, for each unit (layers 0 and 1, the embedding), an all-gather of its
  // 4-byte weights in F and in B and a reduce-scatter of its float32 gradient in B, each moving half
  // the unit's bytes. No sync after the pipeline: the shards are already reduced.
  const double unit_bytes = (2 * m.layer_parameters + m.embedding_parameters) * 4;
  const StagePrediction& s0 = z3.pipelines[0].stages[0];
  EXPECT_NEAR(s0.zero3_comm_seconds, 3 * 0.5 * unit_bytes / 1e9, 1e-15);
  EXPECT_EQ(s0.sync_seconds, 0);
  EXPECT_EQ(z2.pipelines[0].stages[0].zero3_comm_seconds, 0);
  EXPECT_GT(z2.pipelines[0].stages[0].sync_seconds, 0);
  EXPECT_NEAR(z3.pipelines[0].stages[0].per_micro_batch() - z2.pipelines[0].stages[0].per_micro_batch(),
              s0.zero3_comm_seconds, 1e-15);

  // Memory of rank 0 (2 layers and the embedding, 2 replicas): a half shard of the 4-byte weights,
  // what the gather schedule holds at most (the down projection of layer 0 with layer 1 gathered
  // ahead: 352 x 128 is more than the 260 x 128 embedding), the largest parameter's whole float32
  // gradient twice (a 352 x 128 MLP projection: one reduced while B computes the next); the 12
  // bytes of synced gradient and moments halved.
  const double params = 2 * m.layer_parameters + m.embedding_parameters;
  const double down = 352.0 * 128;
  const MemoryBreakdown& mem = z3.ranks[0].memory;
  EXPECT_NEAR(mem.parameters, params * 4 / 2 + (down + m.layer_parameters) * 4 + 2 * down * 4, 1e-6);
  EXPECT_NEAR(mem.zero_states, params * 12 / 2, 1e-6);
  EXPECT_EQ(mem.activations, z2.ranks[0].memory.activations);
  EXPECT_LT(mem.total(), z2.ranks[0].memory.total());
}

TEST(CostModelTermsTest, BucketsHideTheReduceBehindTheBackwardPassButTheLastBucket) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = testing::two_kind_cluster(2, 2, 1e9);
  const Profile profile = testing::two_kind_profile();
  const ModelShape m = ModelShape::of(models::Llama(config));
  // Two pipelines of one stage each (fast rank 0, slow rank 2), one micro-batch of one sequence.
  auto dp2 = [&](int zero) {
    return parse(R"({"name": "dp2", "zero": )" + std::to_string(zero) + R"(, "pipelines": [
        {"micro_batch_size": 1, "num_micro_batches": 1, "stages": [{"ranks": "0", "layers": "0-3"}]},
        {"micro_batch_size": 1, "num_micro_batches": 1, "stages": [{"ranks": "2", "layers": "0-3"}]}]})");
  };
  // 256 KiB buckets from the head back: the embedding (260 x 128 floats, 133,120 B) does not join
  // the bucket of layer 0's q, k, v and norms (132,096 B): it is reduced last, alone.
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 64, .grad_bucket_mb = 0.25});
  EXPECT_EQ(cm.last_bucket_bytes(4, true, true, 1), m.embedding_parameters * 4);
  const CostModel whole(models::Llama(config), topo, profile, {.seq_len = 64, .grad_bucket_mb = 0});

  const double bytes = m.stage_parameters(4, true, true) * 4;
  const double all_reduce = bytes / 1e9, last = m.embedding_parameters * 4 / 1e9;  // ring of 2 at 1e9 B/s
  for (int zero : {0, 1}) {
    SCOPED_TRACE("ZeRO " + std::to_string(zero));
    const Prediction p = cm.predict(dp2(zero)), after_b = whole.predict(dp2(zero));
    // ZeRO-0 reduces all of it in buckets; ZeRO-1 reduce-scatters (half) and gathers the parameters
    // after AdamW (the other half, exposed).
    const double reduce = zero == 0 ? all_reduce : all_reduce / 2;
    const double last_reduce = zero == 0 ? last : last / 2;  // the last bucket's own reduce
    for (int pipe : {0, 1}) {
      const StagePrediction& s = p.pipelines[pipe].stages[0];
      EXPECT_NEAR(after_b.pipelines[pipe].stages[0].sync_seconds, all_reduce, 1e-15);
      const double backward = 2.0 / 3 * s.compute_seconds;
      // The fast rank's backward pass is shorter than what its buckets but the last need (3.1 ms
      // against 3.0 ms), the slow rank's covers them: only the last bucket stays exposed.
      const double exposed = reduce - std::min(reduce - last_reduce, backward);
      if (zero == 0) {
        EXPECT_EQ(std::abs(exposed - last) < 1e-15, pipe == 1);
      }
      EXPECT_NEAR(s.sync_seconds, exposed + (all_reduce - reduce), 1e-15);
      EXPECT_NEAR(s.sync_hidden_seconds, reduce - exposed, 1e-15);
      EXPECT_EQ(after_b.pipelines[pipe].stages[0].sync_hidden_seconds, 0);
    }
    EXPECT_LT(p.step_seconds, after_b.step_seconds);
    EXPECT_THAT(to_string(p), HasSubstr("s behind backward passes"));
  }
  // The tiny model's whole gradient (3.2 MB) fits the default 25 MiB bucket: nothing can hide.
  const CostModel default_buckets(models::Llama(config), topo, profile, {.seq_len = 64});
  EXPECT_EQ(default_buckets.predict(dp2(0)).pipelines[0].stages[0].sync_seconds,
            whole.predict(dp2(0)).pipelines[0].stages[0].sync_seconds);
}

// The runtime's estimate of each rank against the cost model's memory, with the profile's memory
// coefficients fitted to that estimate as `hspmd profile` fits them (planner/memory_fit.h).
TEST(CostModelTermsTest, MemoryMatchesTheRuntimeEstimateOfEveryRank) {
  const models::LlamaConfig config = testing::tiny_config();
  const models::Llama model(config);
  const resolve::Topology topo = testing::two_kind_cluster(4, 0, 1e9);
  Profile profile = testing::two_kind_profile();
  DeviceKindProfile& fast = profile.devices.at("fast");
  fit_state_bytes(model, 1, fast);
  for (int t : {1, 2}) fast.tp.at(t).activations = fit_activations(model, t);
  const int64_t seq_len = 64;
  const CostModel cm(model, topo, profile, {.seq_len = seq_len});
  const models::ModelGraph graph = model.build({});

  const std::string one_stage_dp2 = R"(, "pipelines": [
      {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-3"}]},
      {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "1", "layers": "0-3"}]}]})";
  const std::string dp2_pp2 = R"(, "pipelines": [
      {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1", "layers": "2-3"}]},
      {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}]})";
  const std::string tp2_sp_dp2 = R"(, "pipelines": [
      {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3", "sequence_parallel": true}]},
      {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "2-3", "layers": "0-3", "sequence_parallel": true}]}]})";
  for (const auto& [zero, layout] : std::vector<std::pair<int, std::string>>{
           {0, one_stage_dp2}, {1, one_stage_dp2}, {2, one_stage_dp2}, {3, one_stage_dp2},
           {1, dp2_pp2}, {3, dp2_pp2}, {2, tp2_sp_dp2}, {3, tp2_sp_dp2}}) {
    const sharding::Strategy st = parse(R"({"name": "m", "zero": )" + std::to_string(zero) + layout);
    SCOPED_TRACE(st.to_json_text());
    const Prediction p = cm.predict(st);
    const sharding::AnnotationPlan plan = model.compile_plan(st);
    for (size_t q = 0; q < st.pipelines.size(); ++q) {
      const sharding::PipelineSpec& pipe = st.pipelines[q];
      const int S = static_cast<int>(pipe.stages.size());
      for (int j = 0; j < S; ++j) {
        const int rank = pipe.stages[j].ranks.front();
        const specialize::MemoryEstimate e = specialize::estimate_memory(
            specialize::ExecGraph(graph.graph, plan, rank),
            {.micro_batch_tokens = pipe.micro_batch_size * seq_len,
             .micro_batches_in_flight = cm.in_flight(S, j, pipe.num_micro_batches)});
        const MemoryBreakdown& priced = p.ranks[rank].memory;
        // Within 1%: the cost model counts a TP rank's 1/t of every parameter (its norm weights are
        // whole) and a stage's ends as fitted on the one-layer model.
        EXPECT_NEAR(priced.total(), static_cast<double>(e.total()), 0.01 * static_cast<double>(e.total()))
            << "rank " << rank << ": estimate " << e.to_string();
        EXPECT_NEAR(priced.parameters + priced.zero_states,
                    static_cast<double>(e.parameters + e.gradients + e.optimizer_states),
                    0.01 * static_cast<double>(e.parameters + e.gradients + e.optimizer_states))
            << "rank " << rank << ": estimate " << e.to_string();
      }
    }
  }
}

}  // namespace
}  // namespace hspmd::planner
