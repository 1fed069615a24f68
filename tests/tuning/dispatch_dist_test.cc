// Training with dispatch by length on 4 thread ranks over Gloo: two strategies, each for a maximum
// length, chosen per batch of a long-tailed dataset (switching between them with the fused BSR), and
// within a strategy each pipeline fed the sequences the dispatcher gave it. Every step's loss and
// gradient norm and the final weights equal the single-process run on the same batches; on ranks
// whose tensors live on a (fake) device they equal the host run bit for bit.
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
#include "runtime/fake_device_compute_testlib.h"
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

// Where the ranks compute: the host, or a fake device (runtime/fake_device_compute_testlib.h: the
// CPU kernels behind device tensors) whose Reshards and switches stage through host buffers (as
// over Gloo) or move its memory itself (comm_on_device, as over NCCL).
enum class Ranks { kHost, kDeviceStaged, kDeviceMemory };

struct DispatchedRun {
  std::vector<std::vector<double>> losses, norms;  // [rank][step]
  std::vector<std::vector<size_t>> chosen;         // [rank][step] the strategy's index
  std::vector<int> switches;                       // [rank]
  graph::TensorMap weights;
};

class DispatchDistTest : public runtime::testing::TempDirTest {
 protected:
  void SetUp() override {
    runtime::testing::TempDirTest::SetUp();
    // Documents of median 8 tokens, up to 64 (the context length): some batches of 128 tokens hold
    // only sequences of <= 48 tokens, others a longer one.
    const data::TokenDataset corpus = data::TokenDataset::open(runtime::testing::corpus_dataset());
    data::write_long_tailed_dataset(corpus, path("mixed"),
                                    {.documents = 600, .median = 8, .max_length = 64, .sigma = 0.8, .seed = 1});
    options_.global_batch_tokens = 128;
  }

  // Trains options_ with two strategies chosen per batch by its longest sequence: "short" (<= 48
  // tokens: two heterogeneous pipelines, TP 2 on the fast ranks and the slow ranks as two stages)
  // and "long" (<= 64: one pipeline, TP 2 x PP 2); `sp`: sequence parallelism on every TP 2 stage.
  DispatchedRun dispatched(Ranks where, bool sp = false) const {
    const data::TokenDataset ds = data::TokenDataset::open(path("mixed"));
    const std::string tp2_sp = sp ? R"(, "sequence_parallel": true)" : "";
    const sharding::Strategy short_st = runtime::testing::strategy(R"({"name": "short", "pipelines": [
        {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3")" + tp2_sp + R"(}]},
        {"micro_batch_size": 1, "num_micro_batches": 2,
         "stages": [{"ranks": "2", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}]})");
    const sharding::Strategy long_st = runtime::testing::strategy(R"({"name": "long", "pipelines": [
        {"micro_batch_size": 1, "num_micro_batches": 2,
         "stages": [{"ranks": "0-1", "layers": "0-1")" + tp2_sp + R"(}, {"ranks": "2-3", "layers": "2-3")" + tp2_sp +
                                                                   R"(}]}]})");
    const resolve::Topology topo = four_ranks();
    const Profile profile = planner::testing::two_kind_profile(3.0);
    const CostModel cm(models::Llama(config_), topo, profile, {.seq_len = options_.seq_len});
    const LengthStrategies set(models::Llama(config_), cm, {{48, short_st}, {64, long_st}},
                               {.seq_len = options_.seq_len});
    DispatchedRun out;
    out.losses.resize(4);
    out.norms.resize(4);
    out.chosen.resize(4);
    out.switches.resize(4);
    std::mutex mutex;
    comm::run_thread_ranks(4, [&](int rank, comm::GroupCache& groups) {
      DispatchedTraining run(set, /*depth=*/2);
      const size_t first = run.first_strategy(ds, options_, {});
      runtime::DistOptions options;
      options.train = options_;
      options.plan_name = set.at(first).strategy.name;
      auto memory = std::make_shared<hspmd::testing::FakeDeviceMemory>();
      if (where != Ranks::kHost) {
        options.compute = [memory](int) { return runtime::testing::fake_device_compute(memory); };
        options.comm_on_device = where == Ranks::kDeviceMemory;
      }
      run.install(options);
      runtime::DistTrainer t(models::llama(config_), ds, set.plan(first), options, rank, 4, groups);
      run.start(ds, options_, t.loader_state(), first, 1);
      while (!t.done()) {
        run.before_step(t);
        out.chosen[rank].push_back(run.decision().strategy);
        if (rank == 0 && where == Ranks::kHost) std::printf("%s\n", run.decision().to_string(set).c_str());
        const runtime::StepMetrics m = t.step();
        out.losses[rank].push_back(m.loss);
        out.norms[rank].push_back(m.grad_norm);
      }
      out.switches[rank] = run.switches();
      if (where != Ranks::kHost) {  // the rank's state lived on the device; packed there only with comm_on_device
        EXPECT_GT(memory->in_use, 0u);
        EXPECT_GT(memory->to_host, 0);
        if (where == Ranks::kDeviceMemory) EXPECT_GT(memory->region_copies, 0);
        else EXPECT_EQ(memory->region_copies, 0);
      }
      std::lock_guard<std::mutex> lock(mutex);
      runtime::testing::add_parameter_shards(t, out.weights);
    });
    // Both strategies ran, with switches in between, the same on every rank.
    for (int r = 1; r < 4; ++r) EXPECT_EQ(out.chosen[r], out.chosen[0]);
    EXPECT_NE(std::count(out.chosen[0].begin(), out.chosen[0].end(), 0u), 0) << "no batch ran under 'short'";
    EXPECT_NE(std::count(out.chosen[0].begin(), out.chosen[0].end(), 1u), 0) << "no batch ran under 'long'";
    EXPECT_GE(out.switches[0], 2);
    // Each batch ran under a strategy whose maximum length holds its longest sequence.
    data::Loader loader(ds, {.seq_len = options_.seq_len, .global_batch_tokens = options_.global_batch_tokens,
                             .seed = options_.seed});
    for (size_t s = 0; s < out.chosen[0].size(); ++s) {
      size_t longest = 0;
      for (const data::Segment& seg : loader.next()) longest = std::max(longest, seg.tokens.size());
      EXPECT_LE(static_cast<int64_t>(longest), set.at(out.chosen[0][s]).max_len) << "step " << s + 1;
    }
    return out;
  }

  // Every step's loss and gradient norm and the final weights against one process on the same batches.
  void expect_matches_single_process(const DispatchedRun& r) const {
    const data::TokenDataset ds = data::TokenDataset::open(path("mixed"));
    runtime::Trainer single(models::llama(config_), ds, options_);
    for (size_t s = 0; s < r.losses[0].size(); ++s) {
      const runtime::StepMetrics m = single.step();
      for (int rank = 0; rank < 4; ++rank) {
        EXPECT_NEAR(r.losses[rank][s], m.loss, 1e-5 * std::abs(m.loss)) << "rank " << rank << " step " << s + 1;
        EXPECT_NEAR(r.norms[rank][s], m.grad_norm, 1e-5 * m.grad_norm) << "rank " << rank << " step " << s + 1;
      }
    }
    const graph::TensorMap expected = single.parameters();
    ASSERT_EQ(r.weights.size(), expected.size());
    for (const auto& [name, w] : expected) {
      ASSERT_TRUE(r.weights.count(name)) << name;
      EXPECT_LT(runtime::testing::relative_difference(r.weights.at(name), w), 1e-5) << name;
    }
  }

  const models::LlamaConfig config_ = dist_config();
  runtime::TrainerOptions options_ = dist_options(8);
};

TEST_F(DispatchDistTest, TwoStrategiesSwitchingPerBatchByMaxLengthMatchSingleProcess) {
  expect_matches_single_process(dispatched(Ranks::kHost));
}

// Sequence parallelism on the TP 2 stages: the dispatcher's micro-batches hold any number of tokens
// (packed, unpadded), so the runtime pads each row to an even count with a padding document; the
// losses over the real tokens, the norms and the weights equal one process on the unpadded batches.
TEST_F(DispatchDistTest, SequenceParallelStrategiesOnAnyTokenCountMatchSingleProcess) {
  expect_matches_single_process(dispatched(Ranks::kHost, /*sp=*/true));
}

// Dispatch by length on GPU ranks: the per-batch switches move device state (host copies through
// the staging buffers, or device buffers), a pipeline's share of the batch is copied in, and the run
// equals the host run bit for bit (the same CPU kernels in the same order).
TEST_F(DispatchDistTest, OnDevicesEqualsTheHostBitForBit) {
  const DispatchedRun host = dispatched(Ranks::kHost);
  for (const Ranks where : {Ranks::kDeviceStaged, Ranks::kDeviceMemory}) {
    SCOPED_TRACE(where == Ranks::kDeviceStaged ? "host staging" : "communicators on device memory");
    const DispatchedRun device = dispatched(where);
    EXPECT_EQ(device.chosen, host.chosen);
    EXPECT_EQ(device.losses, host.losses);
    EXPECT_EQ(device.norms, host.norms);
    ASSERT_EQ(device.weights.size(), host.weights.size());
    for (const auto& [name, w] : host.weights) {
      EXPECT_EQ(runtime::testing::relative_difference(device.weights.at(name), w), 0.0) << name;
    }
  }
}

}  // namespace
}  // namespace hspmd::tuning
