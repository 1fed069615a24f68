// Graph switching (§7) against the single-process oracle: a run that moves its weights and AdamW
// moments to another strategy mid-training (DistTrainer::switch_to, one fused BSR) has every step's
// loss and its final weights equal to the single-process run (relative 1e-5, float32), whatever
// changes across the switch. Ranks run as threads of this process over Gloo.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <mutex>
#include <regex>

#include "hspmd/comm/thread_ranks.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/models/llama.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/runtime/dist_trainer.h"
#include "runtime/dist_run_testlib.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

using testing::dist_config;
using testing::dist_options;
using testing::DistRun;
using testing::expect_matches_single_process;
using testing::Phase;
using testing::run_phases;
using testing::strategy;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kSteps = 4;

const char* kDp2 = R"({"name": "dp2", "pipelines": [
  {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0", "layers": "0-3"}]},
  {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "1", "layers": "0-3"}]}]})";
const char* kTp2 = R"({"name": "tp2", "pipelines": [
  {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3"}]}]})";
const char* kTp2Pp2 = R"({"name": "tp2-pp2", "pipelines": [
  {"micro_batch_size": 1, "num_micro_batches": 4,
   "stages": [{"ranks": "0-1", "layers": "0-1"}, {"ranks": "2-3", "layers": "2-3"}]}]})";
// TP 2 next to a 2-stage pipeline, with their own micro-batch sizes and counts.
const char* kHetero = R"({"name": "hetero", "pipelines": [
  {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
  {"micro_batch_size": 1, "num_micro_batches": 2,
   "stages": [{"ranks": "2", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}]})";

// The steps of a run with the strategy switching between them.
void expect_switched_run_matches(const std::vector<Phase>& phases) {
  const DistRun r = run_phases(phases, dist_options(kSteps));
  for (size_t rank = 0; rank < r.switches.size(); ++rank) {
    ASSERT_EQ(r.switches[rank].size(), phases.size() - 1) << "rank " << rank;
  }
  expect_matches_single_process(r, kSteps);
}

TEST(Switch, DataParallelToTensorParallel) {
  expect_switched_run_matches({{1, strategy(kDp2)}, {3, strategy(kTp2)}});
}

TEST(Switch, TensorAndPipelineParallelToHeterogeneous) {
  expect_switched_run_matches({{1, strategy(kTp2Pp2)}, {3, strategy(kHetero)}});
}

TEST(Switch, LayersResplitAcrossStages) {
  // Three stages become two with another split, and the micro-batches change too.
  expect_switched_run_matches({{1, strategy(R"({"name": "pp3", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 4,
     "stages": [{"ranks": "0", "layers": "0"}, {"ranks": "1", "layers": "1-2"}, {"ranks": "2", "layers": "3"}]}]})")},
                               {3, strategy(R"({"name": "pp2-resplit", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 2,
     "stages": [{"ranks": "0", "layers": "0-2"}, {"ranks": "1-2", "layers": "3"}]}]})")}});
}

TEST(Switch, Zero1OnOffOn) {
  // ZeRO-1 shards the moments over the data-parallel ranks: the switch gathers them, then splits
  // them again across different TP degrees.
  expect_switched_run_matches({{1, strategy(R"({"name": "dp2-zero1", "zero1": true, "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0", "layers": "0-3"}]},
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "1", "layers": "0-3"}]}]})")},
                               {2, strategy(kDp2)},
                               {4, strategy(R"({"name": "hetero-tp-zero1", "zero1": true, "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "2", "layers": "0-3"}]}]})")}});
}

TEST(Switch, RankLeavesAndComesBack) {
  // 4 ranks -> 3 (rank 3 waits as a spare, holding nothing) -> 4 again.
  const char* three = R"({"name": "three", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2", "layers": "0-3"}]}]})";
  const DistRun r = run_phases({{1, strategy(kHetero)}, {2, strategy(three)}, {4, strategy(kTp2Pp2)}},
                               dist_options(kSteps));
  // Rank 3 sends its state away when it leaves and receives state when it returns.
  EXPECT_GT(r.switches[3][0].rank_sent_bytes, 0);
  EXPECT_EQ(r.switches[3][1].rank_sent_bytes, 0);
  EXPECT_EQ(r.switches[3][1].sent_by_rank.count(3), 0u);
  expect_matches_single_process(r, kSteps);
}

TEST(Switch, BackToAKnownPlanReusesItsGraphs) {
  const DistRun r = run_phases({{1, strategy(kTp2Pp2)}, {2, strategy(kHetero)}, {4, strategy(kTp2Pp2)}},
                               dist_options(kSteps));
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(r.specializations[rank], 2) << rank;
    EXPECT_TRUE(r.switches[rank][0].specialized) << rank;
    EXPECT_FALSE(r.switches[rank][1].specialized) << rank;
  }
  expect_matches_single_process(r, kSteps);
}

class SwitchBytes : public testing::TempDirTest {};

// What each rank puts on the wire in a switch is what `hspmd explain --switch` plans for the same
// pair of strategies on the same cluster: TP 2 on node 0 grows to a second TP pair on node 1 (the
// spares until then) with ZeRO-1 across the pairs.
TEST_F(SwitchBytes, EachRankSendsWhatExplainPlans) {
  const std::string cluster = path("cluster.json"), model = path("model.json"), a = path("a.json"),
                    b = path("b.json");
  std::ofstream(cluster) << R"({"name": "two-nodes", "devices": [
    {"id": 0, "node": 0, "type": "cpu"}, {"id": 1, "node": 0, "type": "cpu"},
    {"id": 2, "node": 1, "type": "cpu"}, {"id": 3, "node": 1, "type": "cpu"}],
    "intra_node_bandwidth": 1e10, "inter_node_bandwidth": 1e9})";
  std::ofstream(model) << dist_config().to_json_text();
  std::ofstream(a) << kTp2;
  std::ofstream(b) << R"({"name": "dp2-zero1-tp2", "zero1": true, "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "2-3", "layers": "0-3"}]}]})";
  const testing::CommandResult explained = testing::run_hspmd("explain --switch " + a + " " + b + " --model " + model +
                                                              " --cluster " + cluster + " --states params+adam");
  ASSERT_EQ(explained.code, 0) << explained.output;
  std::map<int, int64_t> planned;  // sender -> bytes, from "  2 -> 0: 1.2 KiB (1234 bytes), 1 message, ..."
  const std::regex pair(R"(\n  (\d+) -> (\d+): [^(]*\((\d+) bytes\))");
  for (auto it = std::sregex_iterator(explained.output.begin(), explained.output.end(), pair);
       it != std::sregex_iterator(); ++it) {
    planned[std::stoi((*it)[1])] += std::stoll((*it)[3]);
  }
  ASSERT_FALSE(planned.empty()) << explained.output;

  const resolve::Topology topo = resolve::Topology::from_file(cluster);
  const DistRun r = run_phases({{1, sharding::Strategy::from_file(a)}, {2, sharding::Strategy::from_file(b)}},
                               dist_options(2), {.configure = [&](int, DistOptions& o) { o.topology = &topo; }});
  for (int rank = 0; rank < 4; ++rank) {
    const int64_t expected = planned.count(rank) ? planned.at(rank) : 0;
    EXPECT_EQ(r.switches[rank][0].rank_sent_bytes, expected) << "rank " << rank;
    EXPECT_EQ(r.switches[rank][0].sent_by_rank.count(rank) ? r.switches[rank][0].sent_by_rank.at(rank) : 0, expected);
  }
  EXPECT_GT(r.switches[0][0].sent_by_tier.at(resolve::LinkTier::kInterNode), 0);
  EXPECT_EQ(r.switches[0][0].sent_by_tier.at(resolve::LinkTier::kInterNode), r.switches[0][0].sent_bytes);
  // What the wire carried per tier (counted at the sends, summed over the ranks) is what explain
  // prints per tier ("  inter-node: 1.2 MiB (1234 bytes)").
  std::map<std::string, int64_t> explained_tiers;
  const std::regex tier(R"(\n  (intra-node|inter-node): [^(]*\((\d+) bytes\))");
  for (auto it = std::sregex_iterator(explained.output.begin(), explained.output.end(), tier);
       it != std::sregex_iterator(); ++it) {
    if (std::stoll((*it)[2]) > 0) explained_tiers[(*it)[1]] = std::stoll((*it)[2]);
  }
  ASSERT_FALSE(explained_tiers.empty()) << explained.output;
  for (int rank = 0; rank < 4; ++rank) {
    std::map<std::string, int64_t> wire;
    for (const auto& [t, bytes] : r.switches[rank][0].wire_by_tier) wire[std::string(resolve::link_tier_name(t))] = bytes;
    EXPECT_EQ(wire, explained_tiers) << "rank " << rank;
  }
  expect_matches_single_process(r, 2);
}

// A switch that cannot be made (an invalid plan, or one beyond a rank's memory) is refused on every
// rank before any state moves; training goes on under the old plan, still on the oracle's path.
TEST(Switch, RefusedSwitchLeavesTrainingOnTheOldPlan) {
  const models::LlamaConfig config = dist_config();
  const sharding::AnnotationPlan tp2 = models::compile_llama_plan(config, strategy(kTp2));
  // Everything on rank 0, which has room for its TP half only.
  const sharding::AnnotationPlan alone = models::compile_llama_plan(config, strategy(R"({"name": "alone", "pipelines": [
    {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "0", "layers": "0-3"}]}]})"));
  sharding::AnnotationPlan no_pipelines = tp2;
  no_pipelines.pipelines.clear();
  const models::LlamaModel model = models::build_llama(config);
  auto estimate = [&](const sharding::AnnotationPlan& plan) {
    const specialize::ExecGraph exec(model.graph, plan, 0);
    const sharding::PipelineSchedule& mb = plan.pipelines[exec.data_group()];
    return specialize::estimate_memory(exec, {.micro_batch_tokens = mb.micro_batch_size * dist_options(1).seq_len,
                                              .micro_batches_in_flight = 1})
        .total();
  };
  const int64_t capacity = (estimate(tp2) + estimate(alone)) / 2;
  ASSERT_LT(estimate(tp2), capacity);

  data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  DistRun r;
  r.losses.resize(2);
  r.grad_norms.resize(2);
  std::vector<std::string> refusals(4);
  std::mutex mutex;
  comm::run_thread_ranks(2, [&](int rank, comm::GroupCache& groups) {
    DistOptions o;
    o.train = dist_options(kSteps);
    o.plan_name = "tp2";
    o.device = {.rank = rank, .name = "small", .speed = 1.0, .memory_bytes = capacity};
    DistTrainer t(models::llama(config), ds, tp2, o, rank, 2, groups);
    while (!t.done()) {
      if (t.step_count() == 1) {
        refusals[2 * rank] = testing::error_of([&] { t.switch_to(alone, "alone"); });
        refusals[2 * rank + 1] = testing::error_of([&] { t.switch_to(no_pipelines, "no-pipelines"); });
        EXPECT_EQ(t.plan_name(), "tp2");
        EXPECT_EQ(t.specializations(), 1);
      }
      const StepMetrics m = t.step();
      r.losses[rank].push_back(m.loss);
      r.grad_norms[rank].push_back(m.grad_norm);
    }
    std::lock_guard<std::mutex> lock(mutex);
    testing::add_parameter_shards(t, r.weights);
  });
  for (int rank = 0; rank < 2; ++rank) {
    // Both ranks give rank 0's reason: it is the one without room.
    EXPECT_THAT(refusals[2 * rank], AllOf(HasSubstr("refused before any state moved"), HasSubstr("rank 0"),
                                          HasSubstr("capacity")))
        << rank;
    EXPECT_THAT(refusals[2 * rank + 1], AllOf(HasSubstr("refused"), HasSubstr("no pipelines"))) << rank;
  }
  expect_matches_single_process(r, kSteps);
}

}  // namespace
}  // namespace hspmd::runtime
