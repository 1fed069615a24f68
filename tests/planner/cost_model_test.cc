// The cost model on a hand-checked heterogeneous strategy: per-stage times, the pipeline bubble,
// gradient sync and memory per micro-batches in flight (1F1B vs GPipe).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hspmd/core/error.h"
#include "hspmd/models/llama_model.h"
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
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 64});
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
  const CostModel one_f_one_b(models::Llama(config), topo, profile, {.seq_len = 64});
  const CostModel gpipe(models::Llama(config), topo, profile,
                        {.seq_len = 64, .schedule = specialize::ScheduleKind::kGPipe});
  const Prediction a = one_f_one_b.predict(hetero()), b = gpipe.predict(hetero());
  // Rank 2: first of 2 stages, 4 micro-batches: 1F1B keeps 2 in flight, GPipe 4.
  const ActivationFit& act = profile.at("slow", 1).activations;
  const double keep = 1 * act.keep_per_token * 64;
  EXPECT_NEAR(a.ranks[2].memory.activations, 2 * keep + act.transient_per_token * 64, 1e-9);
  EXPECT_NEAR(b.ranks[2].memory.activations, 4 * keep + act.transient_per_token * 64, 1e-9);
  // ZeRO-1 over 2 pipelines halves the optimizer states.
  const ModelShape shape = ModelShape::of(models::Llama(config));
  const double params = shape.layer_parameters + shape.embedding_parameters;
  EXPECT_NEAR(a.ranks[2].memory.zero_states, params * 12 / 2, 1e-6);
  EXPECT_TRUE(a.fits);
  const resolve::Topology small = testing::two_kind_cluster(2, 2, 4e6);
  const Prediction c = CostModel(models::Llama(config), small, profile, {.seq_len = 64}).predict(hetero());
  EXPECT_FALSE(c.fits);
  ASSERT_FALSE(c.overflows.empty());
  EXPECT_THAT(c.overflows.front(), HasSubstr("of 3.81 MiB"));
}

// A stage's parameters: its layers, the embedding on the first stage, the head on the last; any
// split of the layers into stages counts every parameter of the model once.
TEST(CostModelTest, StageParametersCoverTheModelOnce) {
  const models::LlamaConfig config = testing::tiny_config();  // 4 layers
  const ModelShape m = ModelShape::of(models::Llama(config));
  const double total = static_cast<double>(config.num_parameters());
  EXPECT_EQ(m.stage_parameters(4, true, true), total);
  const double split = m.stage_parameters(1, true, false) + m.stage_parameters(2, false, false) +
                      m.stage_parameters(1, false, true);
  EXPECT_EQ(split, total);
  EXPECT_EQ(m.stage_parameters(2, false, false), 2 * m.layer_parameters);
  EXPECT_GT(m.stage_parameters(0, true, false), 0);  // a stage of the embedding alone
}

// A CP stage: its TP and CP degrees priced apart. Ranks 0-3 of the fast node as TP 2 x CP 2 (CP
// outer: TP groups {0,1} and {2,3}, CP groups {0,2} and {1,3}), all 4 layers, 2 micro-batches of 1.
TEST(CostModelTest, ContextParallelStageIsPricedByItsTpAndCpDegrees) {
  const models::LlamaConfig config = testing::tiny_config();  // hidden 128, 4 heads, 2 KV heads
  const resolve::Topology topo = testing::two_kind_cluster(4, 2, 1e9);
  const Profile profile = testing::two_kind_profile(3.0);
  const auto strategy = [](int cp, const char* ranks) {
    return sharding::Strategy::from_json_text(
        std::string(R"({"name": "cp", "zero1": true, "pipelines": [{"micro_batch_size": 1, "num_micro_batches": 2,
          "stages": [{"ranks": ")") + ranks + R"(", "layers": "0-3", "cp": )" + std::to_string(cp) + "}]}]}",
        "cp.json");
  };
  // 62 tokens: the zigzag layout pads them to 64, a multiple of 2 x CP = 4.
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 62});
  const Prediction cp2 = cm.predict(strategy(2, "0-3"));
  const Prediction tp2 = cm.predict(strategy(1, "0-1"));
  const StagePrediction& st = cp2.pipelines[0].stages[0];
  EXPECT_EQ(st.tp, 2);
  EXPECT_EQ(st.cp, 2);
  const TpProfile& f2 = profile.at("fast", 2);
  // Each CP rank: half of the padded sequence's attention and per-token work, the whole fixed cost.
  const double s = 64, b = 1;
  const double layer = b * (f2.layer.a * s * s + f2.layer.c1 * s) / 2 + f2.layer.c0;
  EXPECT_NEAR(st.compute_seconds, 4 * layer + f2.ends.seconds(s / 2), 1e-12);
  // TP: the all-reduces of the rank's 32 tokens over the TP pair (intra-node 1e10 B/s), 4 per layer,
  // the embedding's, the head's and the loss's gather.
  const double ar = 2.0 * 1 / 2 * (32 * 128 * 4) / 1e10;
  const double loss_gather = 2.0 * 1 / 2 * (32 * 3 * 8) / 1e10;
  EXPECT_NEAR(st.tp_comm_seconds, (4 * 4 + 2) * ar + loss_gather, 1e-15);
  // CP: per layer all-gather K and V (64 tokens x 1 KV head of this TP rank x 32 floats) and
  // reduce-scatter their gradients: each moves (n - 1) / n of them.
  const double kv = 64 * (2 / 2) * 32 * 4;
  EXPECT_NEAR(st.cp_comm_seconds, 4 * 4 * (1.0 / 2 * kv / 1e10), 1e-15);
  // Without CP the TP pair does the whole sequence (62 tokens, no padding).
  const StagePrediction& plain = tp2.pipelines[0].stages[0];
  EXPECT_EQ(plain.cp_comm_seconds, 0);
  EXPECT_NEAR(plain.compute_seconds, 4 * f2.layer.seconds(1, 62) + f2.ends.seconds(62), 1e-12);
  EXPECT_LT(st.compute_seconds, plain.compute_seconds);
  // Memory: a CP rank keeps the activations of its own 32 tokens (one micro-batch in flight on a
  // single stage), and ZeRO-1 shards the optimizer
  // states over its 2 CP replicas of the weights; it holds the gathered K and V of one layer.
  const ActivationFit& act = f2.activations;
  const double kv_gathered = 2 * 64 * 32 * 4;
  EXPECT_NEAR(cp2.ranks[0].memory.activations,
              (4 * act.keep_per_token * 32 + act.ends_keep_per_token * 32) + 4 * act.transient_per_token * 32 +
                  act.ends_transient_per_token * 32 + kv_gathered,
              1e-6);
  EXPECT_NEAR(cp2.ranks[0].memory.zero_states, tp2.ranks[0].memory.zero_states / 2, 1e-6);
  // The gradient sync runs over the CP replicas too: all-reduce of the TP shard over ranks {0, 2}.
  EXPECT_GT(st.sync_seconds, 0);
  EXPECT_EQ(plain.sync_seconds, 0);
  EXPECT_THAT(to_string(cp2), HasSubstr("CP2"));
}

// A kind whose CP ranks were measured (Profile::cp, `hspmd profile --cp`) is priced by that
// measurement: at TP 1 a CP-2 rank's layer is the CP fit at the whole padded sequence and its ends
// the CP fit at its own tokens; at TP 2 the TP-2 layer's 1/c share is scaled by what the
// measurement is to TP 1's 1/c share; its CP collectives add the lockstep it measured. A kind
// without the degree keeps the 1/c share and the ring time alone.
TEST(CostModelTest, MeasuredCpRanksPriceCpStages) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = testing::two_kind_cluster(4, 2, 1e9);
  Profile profile = testing::two_kind_profile(3.0);
  // fast TP 1: layer b (2e-8 s^2 + 1.4e-5 s) + 5e-5, ends 4e-6 / token + 1e-4;
  // fast TP 2: layer b (1e-8 s^2 + 7e-6 s) + 5e-5, ends 2e-6 / token + 1e-4 (testing::two_kind_profile).
  profile.devices["fast"].cp[2] = {
      .layer = {3e-8, 9e-6, 7e-5}, .ends = {2.5e-6, 1.2e-4}, .samples = 6, .lockstep_seconds_per_layer = 2e-4};
  const auto strategy = [](const char* ranks, int cp) {
    return sharding::Strategy::from_json_text(
        std::string(R"({"name": "cp", "pipelines": [{"micro_batch_size": 1, "num_micro_batches": 2,
          "stages": [{"ranks": ")") + ranks + R"(", "layers": "0-3", "cp": )" + std::to_string(cp) + "}]}]}",
        "cp.json");
  };
  // 62 tokens, padded to s' = 64 for CP 2; a CP rank holds 32 of them.
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 62});
  const double s = 64, own = 32;
  const double measured_layer = 3e-8 * s * s + 9e-6 * s + 7e-5, measured_ends = 2.5e-6 * own + 1.2e-4;
  const StagePrediction cp2 = cm.predict(strategy("0-1", 2)).pipelines[0].stages[0];
  EXPECT_NEAR(cp2.compute_seconds, 4 * measured_layer + measured_ends, 1e-15);
  // Per layer the K/V ring time (4 collectives, each moving half of 64 tokens x 2 KV heads x 32 x 4
  // bytes over the 1e10 B/s link) and the measured lockstep beyond it.
  EXPECT_NEAR(cp2.cp_comm_seconds, 4 * (4 * 0.5 * (64 * 64 * 4) / 1e10 + 2e-4), 1e-15);
  const double tp1_share = (2e-8 * s * s + 1.4e-5 * s) / 2 + 5e-5, tp1_ends = 4e-6 * own + 1e-4;
  const double tp2_share = (1e-8 * s * s + 7e-6 * s) / 2 + 5e-5, tp2_ends = 2e-6 * own + 1e-4;
  EXPECT_NEAR(cm.predict(strategy("0-3", 2)).pipelines[0].stages[0].compute_seconds,
              4 * tp2_share * measured_layer / tp1_share + tp2_ends * measured_ends / tp1_ends, 1e-15);
  // The slow kind has no CP measurement: its TP-1 layer's 1/c share, 15 = 3 x 5 the slowdown.
  const double slow_share = 3 * (2e-8 * s * s + 1.4e-5 * s) / 2 + 15e-5, slow_ends = 3 * 4e-6 * own + 3e-4;
  const StagePrediction slow = cm.predict(strategy("4-5", 2)).pipelines[0].stages[0];
  EXPECT_NEAR(slow.compute_seconds, 4 * slow_share + slow_ends, 1e-15);
  EXPECT_NEAR(slow.cp_comm_seconds, 4 * (4 * 0.5 * (64 * 64 * 4) / 1e10), 1e-15);
}

// TP 2 against CP 2 on the same two fast devices, one sequence a step, as the sequence grows. Both
// halve the layer's work; TP all-reduces the hidden activations (4 per layer, 2 x 1/2 x s x 128
// floats each) where CP gathers K and V and scatters their gradients (4 per layer, 1/2 x s x 64
// floats each), a quarter of the bytes; but CP replicates the weights, so its step adds their
// gradient all-reduce over the 2 CP ranks, which the TP pair (one pipeline) has not. Short
// sequences therefore prefer TP, long ones CP, and CP's lead grows with the length; each cost moves
// the way its term says: step times grow with the length, a rank's compute and activations shrink
// with the CP degree while the K/V traffic grows with it.
TEST(CostModelTest, LongSequencesPreferCpOverTpAndCostsMoveWithLengthAndDegree) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = testing::two_kind_cluster(4, 2, 1e12);
  const Profile profile = testing::two_kind_profile(3.0);
  const auto one_stage = [](const char* ranks, int cp) {
    return sharding::Strategy::from_json_text(
        std::string(R"({"name": "s", "zero1": true, "pipelines": [{"micro_batch_size": 1, "num_micro_batches": 1,
          "stages": [{"ranks": ")") + ranks + R"(", "layers": "0-3", "cp": )" + std::to_string(cp) + "}]}]}",
        "s.json");
  };
  const sharding::Strategy tp2 = one_stage("0-1", 1), cp2 = one_stage("0-1", 2);
  double previous_tp = 0, previous_cp = 0, previous_lead = -1e9;
  for (int64_t s : {64, 256, 1024, 4096, 16384}) {
    const CostModel cm(models::Llama(config), topo, profile, {.seq_len = s});
    const Prediction t = cm.predict(tp2), c = cm.predict(cp2);
    const StagePrediction &ts = t.pipelines[0].stages[0], &cs = c.pipelines[0].stages[0];
    EXPECT_EQ(ts.tp, 2);
    EXPECT_EQ(cs.tp, 1);
    EXPECT_EQ(cs.cp, 2);
    // Per micro-batch CP's communication is the smaller; per step CP adds the weights' sync.
    EXPECT_LT(cs.cp_comm_seconds + cs.tp_comm_seconds, ts.tp_comm_seconds) << s;
    EXPECT_EQ(ts.sync_seconds, 0) << s;
    EXPECT_GT(cs.sync_seconds, 0) << s;
    EXPECT_GT(t.step_seconds, previous_tp) << s;
    EXPECT_GT(c.step_seconds, previous_cp) << s;
    const double lead = t.step_seconds - c.step_seconds;  // > 0: CP is faster
    EXPECT_GT(lead, previous_lead) << s;
    if (s == 64) {
      EXPECT_LT(lead, 0) << "64 tokens: the TP pair should win, TP " << t.step_seconds << " s, CP " << c.step_seconds;
    }
    if (s >= 4096) {
      EXPECT_GT(lead, 0) << s << " tokens: CP should win, TP " << t.step_seconds << " s, CP " << c.step_seconds;
    }
    previous_tp = t.step_seconds;
    previous_cp = c.step_seconds;
    previous_lead = lead;
  }
  // At 8,192 tokens on one device, CP 1, 2 and 4: less compute and fewer activations per rank, more
  // K/V traffic, as the degree grows (TP 1 inside each CP rank).
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 8192});
  const Prediction c1 = cm.predict(one_stage("0", 1)), c2 = cm.predict(one_stage("0-1", 2)),
                   c4 = cm.predict(one_stage("0-3", 4));
  const auto& s1 = c1.pipelines[0].stages[0];
  const auto& s2 = c2.pipelines[0].stages[0];
  const auto& s4 = c4.pipelines[0].stages[0];
  EXPECT_GT(s1.compute_seconds, s2.compute_seconds);
  EXPECT_GT(s2.compute_seconds, s4.compute_seconds);
  EXPECT_EQ(s1.cp_comm_seconds, 0);
  EXPECT_LT(s2.cp_comm_seconds, s4.cp_comm_seconds);
  EXPECT_GT(c1.ranks[0].memory.activations, c2.ranks[0].memory.activations);
  EXPECT_GT(c2.ranks[0].memory.activations, c4.ranks[0].memory.activations);
  EXPECT_GT(c1.step_seconds, c2.step_seconds);
  EXPECT_GT(c2.step_seconds, c4.step_seconds);
}

// A Mistral config whose window (16) is shorter than the sequence (64) prices each layer's
// attention by the query-key pairs the window leaves: 16 * 17 / 2 + 48 * 16 = 904 of the 64 * 65 / 2
// = 2080 pairs of full causal attention, the rest of the layer alike; under CP each rank does 1/c of
// that, while the K/V all-gathers stay whole (every rank still gathers every key). A sequence no
// longer than the window, or the same config without one, is priced as full attention.
TEST(CostModelTest, SlidingWindowAttentionIsPricedByTheWindow) {
  const auto mistral = [](const std::string& window) {
    return models::LlamaConfig::from_json_text(R"({"model_type": "mistral", "hidden_size": 128,
        "intermediate_size": 352, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 260, "max_position_embeddings": 512, "sliding_window": )" + window + "}",
                                               "mistral.json");
  };
  const models::Llama windowed(mistral("16")), full(mistral("null"));
  const resolve::Topology topo = testing::two_kind_cluster(4, 2, 1e9);
  const Profile profile = testing::two_kind_profile(3.0);
  const TpProfile& f1 = profile.at("fast", 1);
  const double s = 64, fraction = 904.0 / 2080.0;
  const CostModel cw(windowed, topo, profile, {.seq_len = 64}), cf(full, topo, profile, {.seq_len = 64});
  EXPECT_DOUBLE_EQ(ModelShape::of(windowed).attention_fraction(s), fraction);
  EXPECT_DOUBLE_EQ(ModelShape::of(full).attention_fraction(s), 1.0);
  // 4 layers on one rank: only the attention term a s^2 shrinks, by the window's fraction.
  const double attention = 4 * f1.layer.a * s * s;
  EXPECT_NEAR(cf.stage_compute("fast", 1, 4, false, 1), 4 * f1.layer.seconds(1, s), 1e-15);
  EXPECT_NEAR(cw.stage_compute("fast", 1, 4, false, 1), cf.stage_compute("fast", 1, 4, false, 1) - attention * (1 - fraction),
              1e-15);
  // CP 2 (64 tokens need no padding): half of the windowed work per rank, the same K/V traffic.
  EXPECT_NEAR(cw.stage_compute("fast", 1, 4, false, 1, 2),
              cf.stage_compute("fast", 1, 4, false, 1, 2) - attention * (1 - fraction) / 2, 1e-15);
  EXPECT_DOUBLE_EQ(cw.stage_cp_comm({0, 1}, 4, 1, 2), cf.stage_cp_comm({0, 1}, 4, 1, 2));
  // The whole prediction: the windowed model's step is cheaper.
  const sharding::Strategy dp = sharding::Strategy::from_json_text(R"({"name": "one", "pipelines": [
      {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-3"}]}]})", "one.json");
  EXPECT_LT(cw.predict(dp).step_seconds, cf.predict(dp).step_seconds);
  // Sequences within the window: full attention either way.
  EXPECT_DOUBLE_EQ(cw.at_seq_len(16).stage_compute("fast", 1, 4, false, 1),
                   cf.at_seq_len(16).stage_compute("fast", 1, 4, false, 1));
  // Gemma-like: local layers between global ones are priced by the mean over the layers.
  models::LlamaConfig mixed = mistral("16");
  mixed.decoder.sliding_layers = {true, false, true, false};
  EXPECT_DOUBLE_EQ(ModelShape::of(models::Llama(mixed)).attention_fraction(s), (fraction + 1) / 2);
}

// Rings over many ranks read their links through representatives: the same slowest link as every
// pair of the group, on a two-kind spec whose node links differ per kind.
TEST(CostModelTest, LargeGroupsFindTheSlowestLinkOfEveryPair) {
  std::string j = R"({"name": "big", "intra_node_bandwidth": {"fast": 4e11, "slow": 9e11},
    "inter_node_bandwidth": 5e10, "devices": [)";
  for (int r = 0; r < 64; ++r) {
    j += (r ? "," : "") + std::string(R"({"id": )") + std::to_string(r) + R"(, "node": )" + std::to_string(r / 8) +
         R"(, "type": ")" + (r < 24 ? "fast" : "slow") + R"("})";
  }
  const resolve::Topology topo = resolve::Topology::from_json_text(j + "]}", "big.json");
  const models::LlamaConfig config = testing::tiny_config();
  const Profile profile = testing::two_kind_profile();
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 64});
  auto brute = [&](const std::vector<int>& g) {
    double bus = 1e300;
    for (int a : g) {
      for (int b : g) {
        if (a != b) bus = std::min(bus, topo.bandwidth(a, b));
      }
    }
    return bus;
  };
  std::vector<std::vector<int>> groups{{}, {}, {}};
  for (int r = 24; r < 64; ++r) groups[0].push_back(r);    // slow, 5 nodes: inter-node
  for (int r = 0; r < 24; ++r) groups[1].push_back(r);     // fast, 3 nodes
  for (int r = 0; r < 64; r += 3) groups[2].push_back(r);  // both kinds, every node
  for (const auto& g : groups) {
    EXPECT_DOUBLE_EQ(cm.collective_link(g).first, brute(g)) << g.size() << " ranks";
    EXPECT_NEAR(cm.allreduce(g, 1e6), 2.0 * (g.size() - 1) / g.size() * 1e6 / brute(g), 1e-12);
  }
}

TEST(CostModelTest, UnknownKindOrRankIsAnError) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = testing::two_kind_cluster(2, 2, 1e9);
  Profile profile = testing::two_kind_profile();
  profile.devices.erase("slow");
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 64});
  EXPECT_THROW(cm.predict(hetero()), Error);
  const Profile full = testing::two_kind_profile();
  // The cost model keeps a reference to its topology: a temporary one would dangle.
  const resolve::Topology two = testing::two_kind_cluster(1, 1, 1e9);
  const CostModel cm2(models::Llama(config), two, full, {.seq_len = 64});
  EXPECT_THROW(cm2.predict(hetero()), Error);
}

// hetero() with another ZeRO stage.
sharding::Strategy hetero_zero(int zero) {
  sharding::Strategy st = hetero();
  st.zero = zero;
  return st;
}

TEST(CostModelTest, ZeroTwoDropsTheAccumulatorAndReducesOncePerGradientGroup) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = testing::two_kind_cluster(2, 2, 1e9);
  const Profile profile = testing::two_kind_profile();
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 64});
  const Prediction z1 = cm.predict(hetero_zero(1)), z2 = cm.predict(hetero_zero(2));
  // Pipelines run 2 and 4 micro-batches: 2 gradient groups; pipeline 0's micro-batches are a group
  // each, pipeline 1's come in pairs (its whole gradient lives across two backward passes).
  EXPECT_EQ(z1.gradient_groups, 0);
  EXPECT_EQ(z2.gradient_groups, 2);
  EXPECT_THAT(to_string(z2), HasSubstr("ZeRO-2: 2 gradient reduce-scatter(s) per step"));

  // Rank 0 (TP 2, all 4 layers and both ends, 2 sequences of 64 tokens): the float32 accumulator of
  // its parameter shard goes; a backward pass's whole gradient counts beyond the forward transients.
  const ModelShape shape = ModelShape::of(models::Llama(config));
  const ActivationFit& act = profile.at("fast", 2).activations;
  const double params = shape.stage_parameters(4, true, true) / 2;
  const double accumulator = params * 4;
  const double transient = 4 * act.transient_per_token * 128 + act.ends_transient_per_token * 128;
  ASSERT_GT(accumulator, transient);
  EXPECT_NEAR(z1.ranks[0].memory.parameters - z2.ranks[0].memory.parameters, transient, 1e-6);
  EXPECT_NEAR(z2.ranks[0].memory.parameters, params * 8 - accumulator + (accumulator - transient), 1e-6);
  EXPECT_LT(z2.ranks[0].memory.total(), z1.ranks[0].memory.total());
  // The optimizer states and activations are ZeRO-1's, bit for bit; pipeline 1 is priced as ZeRO-1.
  EXPECT_EQ(z2.ranks[0].memory.zero_states, z1.ranks[0].memory.zero_states);
  EXPECT_EQ(z2.ranks[0].memory.activations, z1.ranks[0].memory.activations);
  for (int r : {2, 3}) EXPECT_EQ(z2.ranks[r].memory.total(), z1.ranks[r].memory.total()) << "rank " << r;

  // Communication: ZeRO-1 all-reduces each stage's float32 gradient shard once (ranks 0 and 2: a
  // ring of 2 over the 1e9 B/s inter-node link); ZeRO-2 reduce-scatters it once per group and
  // all-gathers the parameters once: 3 half-rings instead of 2.
  const double bytes = params * 4;
  EXPECT_NEAR(z1.pipelines[0].stages[0].sync_seconds, 2.0 * 1 / 2 * bytes / 1e9, 1e-12);
  EXPECT_NEAR(z2.pipelines[0].stages[0].sync_seconds, 3.0 * 1 / 2 * bytes / 1e9, 1e-12);
  const double stage1_bytes = shape.stage_parameters(3, false, true) * 4;
  EXPECT_NEAR(z2.pipelines[1].stages[1].sync_seconds, 3.0 * 1 / 2 * stage1_bytes / 1e9, 1e-12);
  EXPECT_EQ(z2.pipelines[0].pipeline_seconds, z1.pipelines[0].pipeline_seconds);
  EXPECT_GT(z2.step_seconds, z1.step_seconds);
  // The optimizer's work is ZeRO-1's (the same shards).
  EXPECT_EQ(z2.pipelines[1].stages[0].optimizer_seconds, z1.pipelines[1].stages[0].optimizer_seconds);
}

sharding::Strategy tp2_stage(bool sequence_parallel, int zero = 0) {
  return sharding::Strategy::from_json_text(
      std::string(R"({"name": "tp2", "zero": )") + std::to_string(zero) + R"(, "pipelines": [
      {"micro_batch_size": 2, "num_micro_batches": 2,
       "stages": [{"ranks": "0-1", "layers": "0-3", "sequence_parallel": )" +
          (sequence_parallel ? "true" : "false") + "}]}]}",
      "tp2.json");
}

TEST(CostModelTest, SequenceParallelSplitsTheValuesBetweenTpBlocksAndMovesTheSameBytes) {
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = testing::two_kind_cluster(2, 2, 1e9);
  // Transient values more than SP's 5 split ones (5 x 64 x 4 B per token; llama-tiny measures about
  // 5.7 KiB per token at TP 2, docs/memory.md), fewer than the gradient accumulator holds.
  Profile profile = testing::two_kind_profile();
  profile.devices.at("fast").tp.at(2).activations.transient_per_token = 3000;
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 64});
  const Prediction plain = cm.predict(tp2_stage(false)), sp = cm.predict(tp2_stage(true));
  ASSERT_TRUE(sp.pipelines[0].stages[0].sequence_parallel);
  EXPECT_THAT(to_string(sp), HasSubstr("(fast TP2 SP, 4 layers)"));

  // Memory: per layer and token, 2 kept and 5 transient hidden-wide float32 values held for half of
  // the 2 x 64 tokens instead of all (1 micro-batch in flight on a one-stage pipeline).
  const double half_of_a_vector = 0.5 * 128 * 4 * 128;
  const double saved = 4 * (2 + 5) * half_of_a_vector;
  EXPECT_NEAR(plain.ranks[0].memory.activations - sp.ranks[0].memory.activations, saved, 1e-6);
  EXPECT_LT(sp.ranks[0].memory.total(), plain.ranks[0].memory.total());
  EXPECT_EQ(sp.ranks[0].memory.parameters, plain.ranks[0].memory.parameters);

  // Communication: per layer 4 all-gathers and 4 reduce-scatters of 2 x 64 x 128 floats on a ring of
  // 2 over the intra-node link (1e10 B/s), 2 more for the embedding and 2 for the head, and the
  // loss's gather: what the all-reduces moved.
  const double half_ring = 1.0 / 2 * (2 * 64 * 128 * 4) / 1e10;
  const double loss_gather = 2.0 * 1 / 2 * (2 * 64 * 3 * 8) / 1e10;
  EXPECT_NEAR(sp.pipelines[0].stages[0].tp_comm_seconds, (8 * 4 + 2 + 2) * half_ring + loss_gather, 1e-15);
  EXPECT_NEAR(sp.pipelines[0].stages[0].tp_comm_seconds, plain.pipelines[0].stages[0].tp_comm_seconds, 1e-15);
  EXPECT_EQ(sp.pipelines[0].stages[0].compute_seconds, plain.pipelines[0].stages[0].compute_seconds);

  // A profile whose activation fits already assume SP (derived ones) prices SP as its fits.
  Profile already = profile;
  already.activations_sequence_parallel = true;
  const CostModel cm_already(models::Llama(config), topo, already, {.seq_len = 64});
  EXPECT_EQ(cm_already.predict(tp2_stage(true)).ranks[0].memory.activations, plain.ranks[0].memory.activations);
  EXPECT_EQ(Profile::from_json_text(already.to_json_text(), "p.json").activations_sequence_parallel, true);
  EXPECT_EQ(Profile::from_json_text(profile.to_json_text(), "p.json").activations_sequence_parallel, false);

  // Both: ZeRO-2 counts the whole gradient beyond SP's smaller transients.
  const Prediction both = cm.predict(tp2_stage(true, 2)), z1 = cm.predict(tp2_stage(true, 1));
  const double params = ModelShape::of(models::Llama(config)).stage_parameters(4, true, true) / 2;
  const ActivationFit& act = profile.at("fast", 2).activations;
  const double transient = 4 * act.transient_per_token * 128 - 4 * 5 * half_of_a_vector + act.ends_transient_per_token * 128;
  ASSERT_GT(params * 4, transient);
  EXPECT_NEAR(both.ranks[0].memory.parameters, params * 8 - transient, 1e-6);
  EXPECT_LT(both.ranks[0].memory.total(), z1.ranks[0].memory.total());
}

TEST(CostModelTest, WithoutZeroTwoOrSequenceParallelThePriceIsUnchanged) {
  // The keys' defaults price as before: each part of a ZeRO-1 strategy without SP equals the
  // building blocks' ZeRO-1 figures, bit for bit, and "sequence_parallel": false is no key at all.
  const models::LlamaConfig config = testing::tiny_config();
  const resolve::Topology topo = testing::two_kind_cluster(2, 2, 1e9);
  const Profile profile = testing::two_kind_profile();
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = 64});
  const Prediction p = cm.predict(hetero()), explicit_false = cm.predict(tp2_stage(false, 1));
  const MemoryBreakdown m = cm.stage_memory("fast", 2, 4, true, true, 2, 1, 2, true);
  EXPECT_EQ(p.ranks[0].memory.parameters, m.parameters);
  EXPECT_EQ(p.ranks[0].memory.zero_states, m.zero_states);
  EXPECT_EQ(p.ranks[0].memory.activations, m.activations);
  const std::vector<int> ranks{0, 1};
  EXPECT_EQ(p.pipelines[0].stages[0].tp_comm_seconds,
            cm.stage_tp_comm(ranks, 4, 2) + cm.ends_tp_comm(ranks, true, true, 2));
  const Prediction no_key = cm.predict(sharding::Strategy::from_json_text(R"({"name": "tp2", "zero": 1,
      "pipelines": [{"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3"}]}]})",
                                                                          "tp2.json"));
  EXPECT_EQ(to_string(no_key), to_string(explicit_false));
  EXPECT_EQ(p.gradient_groups, 0);
}

}  // namespace
}  // namespace hspmd::planner
