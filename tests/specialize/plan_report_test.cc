// The plan report behind `hspmd explain --strategy`: on local-hetero-4 (TP 2 in pipeline 0; two
// stages of TP 1 in pipeline 1 with a different micro-batching) the pipelines, schedules,
// resolutions and byte counts are checked against the hand-derived values; every shipped strategy
// produces a report (with the paper's cluster where one fits).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <utility>

#include "hspmd/core/error.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/specialize/exec_graph.h"
#include "hspmd/specialize/plan_report.h"
#include "hspmd/specialize/rank_memory.h"

namespace hspmd::specialize {
namespace {

using ::testing::HasSubstr;

const std::string kRoot = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();

const ReshardGroup& find(const std::vector<ReshardGroup>& groups, const std::string& name) {
  for (const ReshardGroup& g : groups) {
    if (g.display_name() == name) return g;
  }
  std::string all;
  for (const ReshardGroup& g : groups) all += " " + g.display_name();
  throw std::runtime_error("no group " + name + " in:" + all);
}

const DeviceOps& on(const ReshardGroup& g, int device) {
  for (const DeviceOps& d : g.devices) {
    if (d.device == device) return d;
  }
  throw std::runtime_error("no rank " + std::to_string(device) + " in " + g.display_name());
}

class PlanReportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    config_ = models::LlamaConfig::from_file(kRoot + "/configs/llama-tiny.json");  // 4 layers, H 128
    model_ = new models::ModelGraph(models::Llama(config_).build({}));
  }
  static void TearDownTestSuite() { delete model_; }
  PlanReport report(const std::string& strategy, ScheduleKind kind = ScheduleKind::k1F1B) {
    const auto st = sharding::Strategy::from_file(kRoot + "/examples/strategies/" + strategy + ".json");
    return make_plan_report(*model_, models::compile_llama_plan(config_, st), {kind, 16, nullptr});
  }
  static models::LlamaConfig config_;
  static models::ModelGraph* model_;
};
models::LlamaConfig PlanReportTest::config_;
models::ModelGraph* PlanReportTest::model_ = nullptr;

TEST_F(PlanReportTest, LocalHetero4PipelinesAndSchedules) {
  const PlanReport r = report("local-hetero-4");
  ASSERT_EQ(r.pipelines.size(), 2u);
  const PipelineReport& p0 = r.pipelines[0];
  const PipelineReport& p1 = r.pipelines[1];
  EXPECT_EQ(p0.binding, (SymBinding{{"T", 32}, {"N", 2}}));  // 2 sequences of 16 tokens
  EXPECT_EQ(p1.binding, (SymBinding{{"T", 16}, {"N", 1}}));
  ASSERT_EQ(p0.stages.size(), 1u);
  EXPECT_EQ(p0.stages[0].ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(p0.stages[0].layers, "0-3");
  EXPECT_EQ(to_string(p0.stages[0].schedule), "F0 B0 F1 B1");
  ASSERT_EQ(p1.stages.size(), 2u);
  EXPECT_EQ(p1.stages[0].layers, "0-1");
  EXPECT_EQ(p1.stages[1].layers, "2-3");
  EXPECT_EQ(to_string(p1.stages[0].schedule), "F0 F1 B0 F2 B1 F3 B2 B3");
  EXPECT_EQ(to_string(report("local-hetero-4", ScheduleKind::kGPipe).pipelines[1].stages[1].schedule),
            "F0 F1 F2 F3 B0 B1 B2 B3");
}

TEST_F(PlanReportTest, LocalHetero4Resolutions) {
  const PlanReport r = report("local-hetero-4");
  const int64_t H = 128;
  // TP all-reduce of the row-parallel output on [0,1]; pipeline 1 has TP 1: nothing to do there.
  // Layers 0-1 and 2-3 sit on different stages of pipeline 1: two groups of two.
  const ReshardGroup& attn = find(r.activations, "model.layers.{0..1}.attn_out");
  EXPECT_EQ(attn.occurrences, 2);
  EXPECT_EQ(attn.src, "split0{[0-1](P:2);[2]()}");
  EXPECT_EQ(attn.dst, "split0{[0-1](D:2);[2]()}");
  EXPECT_EQ(attn.classification, "bottom[AR,Identity]");
  ASSERT_EQ(attn.devices.size(), 2u);
  ASSERT_EQ(on(attn, 0).ops.size(), 1u);
  EXPECT_EQ(on(attn, 0).ops[0].kind, resolve::CommKind::kAllReduce);
  EXPECT_EQ(on(attn, 0).ops[0].group, (std::vector<int>{0, 1}));
  EXPECT_EQ(on(attn, 0).bytes, 32 * H * 4);  // ring AR: 2 (n-1)/n of [T=32, H] float32
  // Per step: 2 micro-batches on both ranks, 2 layers.
  EXPECT_EQ(attn.step_bytes(), 2 * 2 * 2 * 32 * H * 4);
  EXPECT_EQ(find(r.activations, "model.layers.{2..3}.attn_out").dst, "split0{[0-1](D:2);[3]()}");
  // The hand-over from stage [2] to [3] in pipeline 1 after layer 1; identity in pipeline 0.
  const ReshardGroup& out = find(r.activations, "model.layers.1.output");
  EXPECT_EQ(out.occurrences, 1);
  EXPECT_EQ(out.classification, "bottom[Identity,SR]");
  ASSERT_EQ(out.devices.size(), 2u);
  EXPECT_EQ(on(out, 2).ops[0].kind, resolve::CommKind::kSend);
  EXPECT_EQ(on(out, 2).ops[0].peer, 3);
  EXPECT_EQ(on(out, 2).bytes, 16 * H * 4);
  EXPECT_EQ(on(out, 3).ops[0].kind, resolve::CommKind::kRecv);
  EXPECT_EQ(out.step_bytes(), 4 * 16 * H * 4);  // 4 micro-batches in pipeline 1
  // Its backward brings the gradient home: [3] -> [2].
  const ReshardGroup& back = find(r.activations, "model.layers.1.output.bwd");
  EXPECT_EQ(on(back, 3).ops[0].kind, resolve::CommKind::kSend);
  EXPECT_EQ(on(back, 3).ops[0].peer, 2);
  // Positions narrowed from the whole pipeline to the stage: local copies only.
  EXPECT_TRUE(find(r.activations, "model.layers.{0..1}.positions").local_only());
  // The loss on [0,1] is vocab-parallel: the logits stay split (lm_head_out is the identity) and the
  // row statistics meet in one all-gather of 3 float64 per token (T = 32) per micro-batch.
  const ReshardGroup& loss = find(r.activations, "loss (vocab-parallel row statistics)");
  ASSERT_EQ(loss.devices.size(), 2u);
  EXPECT_EQ(on(loss, 1).ops[0].kind, resolve::CommKind::kAllGather);
  EXPECT_EQ(on(loss, 1).ops[0].group, (std::vector<int>{0, 1}));
  EXPECT_EQ(on(loss, 0).bytes, 3 * 32 * 8);
  EXPECT_EQ(loss.step_bytes(), 2 * 2 * 3 * 32 * 8);
  EXPECT_THROW(find(r.activations, "lm_head_out"), std::runtime_error);
  // The other layers' outputs are the identity everywhere and not listed.
  EXPECT_THROW(find(r.activations, "model.layers.0.output"), std::runtime_error);
  EXPECT_GT(r.reshards_identity, 0);
}

TEST_F(PlanReportTest, LocalHetero4SyncsGathersAndTotals) {
  const PlanReport r = report("local-hetero-4");
  // ZeRO-1 across the two pipelines: every gradient is a partial sum across them.
  const ReshardGroup& q = find(r.gradient_syncs, "model.layers.{0..1}.self_attn.q_proj.weight");
  EXPECT_EQ(q.src, "partial{[0-1](S0:2);[2]()}");
  EXPECT_EQ(q.dst, "split1{[0-1](S0:2);[2]()}");
  EXPECT_EQ(q.classification, "top[SplitRS]");
  EXPECT_FALSE(q.devices.empty());
  EXPECT_FALSE(r.parameter_gathers.empty());
  // Totals: the one tier "all" is the sum of every group's per-step bytes.
  int64_t sum = 0;
  for (const auto* list : {&r.activations, &r.gradient_syncs, &r.parameter_gathers}) {
    for (const ReshardGroup& g : *list) sum += g.step_bytes();
  }
  ASSERT_EQ(r.step_bytes_by_tier.size(), 1u);
  EXPECT_EQ(r.step_bytes_by_tier.at("all"), sum);
  const std::string text = to_string(r);
  EXPECT_THAT(text, HasSubstr("model.layers.{0..1}.attn_out (2x)  bottom[AR,Identity]"));
  EXPECT_THAT(text, HasSubstr("stage 1  ranks [3]"));
}

// The report estimates memory once per class of ranks (specialize/rank_memory.h). On a layout with
// classes that repeat and pipelines that look alike but differ, every rank's estimate must be the
// one its own ExecGraph gives: pipeline 2 repeats pipeline 0 (its estimates are reused); pipeline 1
// has pipeline 0's stages but twice the micro-batch size (another T); pipeline 3 has them with
// fewer micro-batches, the same T and the same micro-batches in flight (under ZeRO-2 its ranks, fed
// the pipeline with the fewest micro-batches, hold no whole gradient between backward passes);
// pipeline 4 is TP 1 with uneven stages. ZeRO-3, where the estimate also follows each rank's gather
// schedule: three copies of pipeline 0 and a TP 1 pipeline with uneven stages and larger micro-batches
// (its shards differ from the others', and the others' from the homogeneous ones').
TEST_F(PlanReportTest, MemoryEqualsEachRanksOwnExecGraphEstimate) {
  auto stage = [](std::vector<int> ranks, int first, int last) {
    sharding::StageSpec s;
    s.ranks = std::move(ranks);
    s.first_layer = first;
    s.last_layer = last;
    return s;
  };
  auto pipeline = [](int size, int count, std::vector<sharding::StageSpec> stages) {
    sharding::PipelineSpec p;
    p.micro_batch_size = size;
    p.num_micro_batches = count;
    p.stages = std::move(stages);
    return p;
  };
  // Every rank's reported estimate against its own ExecGraph's; returns the classes and own estimates.
  auto check = [&](const sharding::Strategy& st, std::vector<int>& classes, std::vector<MemoryEstimate>& own) {
    const sharding::AnnotationPlan plan = models::compile_llama_plan(config_, st);
    const PlanReport r = make_plan_report(*model_, plan, {ScheduleKind::k1F1B, 16, nullptr});
    std::vector<RankMemoryQuery> queries;
    for (const PipelineReport& p : r.pipelines) {
      for (const StageReport& s : p.stages) {
        for (int rank : s.ranks) queries.push_back({rank, {p.binding.at("T"), max_in_flight(s.schedule)}});
      }
    }
    std::sort(queries.begin(), queries.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
    ASSERT_EQ(r.memory.size(), queries.size());
    for (const RankMemoryQuery& q : queries) {
      own.push_back(estimate_memory(ExecGraph(model_->graph, plan, q.rank), q.options));
      const MemoryEstimate& reported = r.memory.at(q.rank).estimate;
      EXPECT_EQ(r.memory.at(q.rank).rank, q.rank);
      EXPECT_EQ(reported.parameters, own.back().parameters) << "rank " << q.rank;
      EXPECT_EQ(reported.gradients, own.back().gradients) << "rank " << q.rank;
      EXPECT_EQ(reported.optimizer_states, own.back().optimizer_states) << "rank " << q.rank;
      EXPECT_EQ(reported.activations, own.back().activations) << "rank " << q.rank;
    }
    classes = memory_classes(model_->graph, plan, graph::deduce_annotations(model_->graph, plan), queries);
  };
  const auto tp2_pp2 = [&](int base, int size, int count) {
    return pipeline(size, count, {stage({base, base + 1}, 0, 1), stage({base + 2, base + 3}, 2, 3)});
  };
  for (int zero : {1, 2}) {
    SCOPED_TRACE("ZeRO " + std::to_string(zero));
    sharding::Strategy st;
    st.name = "classes";
    st.zero = zero;
    st.pipelines = {tp2_pp2(0, 1, 4), tp2_pp2(4, 2, 2), tp2_pp2(8, 1, 4), tp2_pp2(12, 1, 2),
                    pipeline(1, 4, {stage({16}, 0, 2), stage({17}, 3, 3)})};
    std::vector<int> classes;
    std::vector<MemoryEstimate> own;
    check(st, classes, own);
    ASSERT_EQ(classes.size(), 18u);
    // The layout does exercise reuse, and the distinctions the classes must keep.
    EXPECT_EQ(classes[8], classes[0]);
    EXPECT_EQ(classes[11], classes[3]);
    EXPECT_NE(classes[1], classes[0]);  // another index in the TP group
    EXPECT_NE(classes[4], classes[0]);
    EXPECT_NE(own[4].activations, own[0].activations);
    EXPECT_NE(classes[12], classes[0]);
    if (zero == 2) {
      EXPECT_NE(own[12].gradients, own[0].gradients);
    }
    EXPECT_LT(*std::max_element(classes.begin(), classes.end()), 14);
  }
  sharding::Strategy zero3;
  zero3.name = "classes-zero3";
  zero3.zero = 3;
  zero3.pipelines = {tp2_pp2(0, 1, 4), tp2_pp2(4, 1, 4), tp2_pp2(8, 1, 4),
                     pipeline(2, 4, {stage({12}, 0, 2), stage({13}, 3, 3)})};
  std::vector<int> classes;
  std::vector<MemoryEstimate> own;
  check(zero3, classes, own);
  EXPECT_EQ(classes, (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5}));
}

// Every shipped strategy, on its model and (for the paper's strategies) the paper's cluster
// (table15-strategy-a: 5 pipelines with ZeRO-1, where 5 divides no dim of some tensors).
TEST(PlanReportShippedTest, EveryShippedStrategy) {
  std::map<std::string, std::pair<models::LlamaConfig, models::ModelGraph>> models;
  const resolve::Topology paper = resolve::Topology::from_file(kRoot + "/examples/clusters/paper-16h800-32h20.json");
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kRoot + "/examples/strategies")) {
    const std::string file = entry.path().filename().string();
    const bool local = file.rfind("local-", 0) == 0;
    const std::string cfg = local ? "llama-tiny" : file.find("70b") != std::string::npos ? "llama-70b" : "llama-32b";
    auto it = models.find(cfg);
    if (it == models.end()) {
      const models::LlamaConfig config = models::LlamaConfig::from_file(kRoot + "/configs/" + cfg + ".json");
      it = models.emplace(cfg, std::make_pair(config, models::Llama(config).build({}))).first;
    }
    const auto st = sharding::Strategy::from_file(entry.path().string());
    const auto plan = models::compile_llama_plan(it->second.first, st);
    const PlanReportOptions options{ScheduleKind::k1F1B, local ? 64 : 4096, local ? nullptr : &paper};
    const PlanReport r = make_plan_report(it->second.second, plan, options);
    EXPECT_EQ(r.pipelines.size(), st.pipelines.size()) << file;
    for (size_t p = 0; p < st.pipelines.size(); ++p) {
      EXPECT_EQ(r.pipelines[p].stages.size(), st.pipelines[p].stages.size()) << file << " pipeline " << p;
    }
    EXPECT_FALSE(r.gradient_syncs.empty()) << file;
    EXPECT_FALSE(to_string(r).empty());
    ++n;
  }
  EXPECT_GE(n, 18);
}

}  // namespace
}  // namespace hspmd::specialize
