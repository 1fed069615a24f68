// Training with dispatch by length on 4 thread ranks over Gloo: two strategies, each for a maximum
// length, chosen per batch of a long-tailed dataset (switching between them with the fused BSR), and
// within a strategy each pipeline fed the sequences the dispatcher gave it. Every step's loss and
// gradient norm and the final weights equal the single-process run on the same batches.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>

#include "hspmd/comm/thread_ranks.h"
#include "hspmd/data/long_tailed.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/tuning/dispatched_training.h"
#include "planner/planner_testlib.h"
#include "runtime/dist_run_testlib.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::tuning {
namespace {
using planner::CostModel;
using planner::LengthStrategies;
using planner::Profile;

using runtime::testing::dist_config;
using runtime::testing::dist_options;

// Ranks 0-1 "fast", 2-3 "slow", 1 GB each, one node.
resolve::Topology four_ranks() {
  std::string j = R"({"name": "four", "devices": [)";
  for (int r = 0; r < 4; ++r) {
    j += (r ? "," : "") + std::string(R"({"id": )") + std::to_string(r) + R"(, "node": 0, "type": ")" +
         (r < 2 ? "fast" : "slow") + R"(", "memory": 1e9, "peak_flops": 1e11})";
  }
  j += R"(], "intra_node_bandwidth": 1e10, "inter_node_bandwidth": 1e10})";
  return resolve::Topology::from_json_text(j, "four.json");
}

class DispatchDistTest : public runtime::testing::TempDirTest {};

TEST_F(DispatchDistTest, TwoStrategiesSwitchingPerBatchByMaxLengthMatchSingleProcess) {
  // Documents of median 8 tokens, up to 64 (the context length): some batches of 128 tokens hold
  // only sequences of <= 48 tokens, others a longer one.
  const data::TokenDataset corpus = data::TokenDataset::open(runtime::testing::corpus_dataset());
  data::write_long_tailed_dataset(corpus, path("mixed"),
                                  {.documents = 600, .median = 8, .max_length = 64, .sigma = 0.8, .seed = 1});
  const data::TokenDataset ds = data::TokenDataset::open(path("mixed"));
  runtime::TrainerOptions o = dist_options(8);
  o.global_batch_tokens = 128;

  // "short" (<= 48 tokens): two heterogeneous pipelines (TP 2 on the fast ranks; the slow ranks as
  // two stages). "long" (<= 64): one pipeline, TP 2 x PP 2.
  const sharding::Strategy short_st = runtime::testing::strategy(R"({"name": "short", "pipelines": [
      {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
      {"micro_batch_size": 1, "num_micro_batches": 2,
       "stages": [{"ranks": "2", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}]})");
  const sharding::Strategy long_st = runtime::testing::strategy(R"({"name": "long", "pipelines": [
      {"micro_batch_size": 1, "num_micro_batches": 2,
       "stages": [{"ranks": "0-1", "layers": "0-1"}, {"ranks": "2-3", "layers": "2-3"}]}]})");
  const models::LlamaConfig config = dist_config();
  const resolve::Topology topo = four_ranks();
  const Profile profile = planner::testing::two_kind_profile(3.0);
  const CostModel cm(models::Llama(config), topo, profile, {.seq_len = o.seq_len});
  const LengthStrategies set(models::Llama(config), cm, {{48, short_st}, {64, long_st}}, {.seq_len = o.seq_len});

  std::vector<std::vector<double>> losses(4), norms(4);
  std::vector<std::vector<size_t>> chosen(4);
  std::vector<int> switches(4);
  graph::TensorMap weights;
  std::mutex mutex;
  comm::run_thread_ranks(4, [&](int rank, comm::GroupCache& groups) {
    DispatchedTraining run(set, /*depth=*/2);
    const size_t first = run.first_strategy(ds, o, {});
    runtime::DistOptions options;
    options.train = o;
    options.plan_name = set.at(first).strategy.name;
    run.install(options);
    runtime::DistTrainer t(models::llama(config), ds, set.plan(first), options, rank, 4, groups);
    run.start(ds, o, t.loader_state(), first, 1);
    while (!t.done()) {
      run.before_step(t);
      chosen[rank].push_back(run.decision().strategy);
      if (rank == 0) std::printf("%s\n", run.decision().to_string(set).c_str());
      const runtime::StepMetrics m = t.step();
      losses[rank].push_back(m.loss);
      norms[rank].push_back(m.grad_norm);
    }
    switches[rank] = run.switches();
    std::lock_guard<std::mutex> lock(mutex);
    runtime::testing::add_parameter_shards(t, weights);
  });

  // Both strategies ran, with switches in between, the same on every rank.
  for (int r = 1; r < 4; ++r) EXPECT_EQ(chosen[r], chosen[0]);
  EXPECT_NE(std::count(chosen[0].begin(), chosen[0].end(), 0u), 0) << "no batch ran under 'short'";
  EXPECT_NE(std::count(chosen[0].begin(), chosen[0].end(), 1u), 0) << "no batch ran under 'long'";
  EXPECT_GE(switches[0], 2);
  // Each batch ran under a strategy whose maximum length holds its longest sequence.
  data::Loader loader(ds, {.seq_len = o.seq_len, .global_batch_tokens = o.global_batch_tokens, .seed = o.seed});
  for (size_t s = 0; s < chosen[0].size(); ++s) {
    size_t longest = 0;
    for (const data::Segment& seg : loader.next()) longest = std::max(longest, seg.tokens.size());
    EXPECT_LE(static_cast<int64_t>(longest), set.at(chosen[0][s]).max_len) << "step " << s + 1;
  }

  runtime::Trainer single(models::llama(config), ds, o);
  for (size_t s = 0; s < losses[0].size(); ++s) {
    const runtime::StepMetrics m = single.step();
    for (int r = 0; r < 4; ++r) {
      EXPECT_NEAR(losses[r][s], m.loss, 1e-5 * std::abs(m.loss)) << "rank " << r << " step " << s + 1;
      EXPECT_NEAR(norms[r][s], m.grad_norm, 1e-5 * m.grad_norm) << "rank " << r << " step " << s + 1;
    }
  }
  const graph::TensorMap expected = single.parameters();
  ASSERT_EQ(weights.size(), expected.size());
  for (const auto& [name, w] : expected) {
    ASSERT_TRUE(weights.count(name)) << name;
    EXPECT_LT(runtime::testing::relative_difference(weights.at(name), w), 1e-5) << name;
  }
}

}  // namespace
}  // namespace hspmd::tuning
