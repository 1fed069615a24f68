// The trainer's device paths without a GPU: ranks whose tensors live on a fake device
// (runtime/fake_device_compute_testlib.h: the CPU kernels behind device tensors) train exactly as
// host ranks do. This runs what a GPU rank does around its kernels: parameters initialized on the
// host and copied in, feeds copied in, the loss copied out, gradients summed and AdamW through the
// ComputeDevice, Reshards and the vocabulary-parallel loss's gather staged through host buffers,
// and checkpoints written from host copies.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <memory>
#include <filesystem>
#include <string>
#include <vector>

#include "hspmd/comm/thread_ranks.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/runtime/trainer.h"
#include "runtime/dist_run_testlib.h"
#include "runtime/fake_device_compute_testlib.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

struct TrainRun {
  std::vector<std::vector<double>> losses;  // [rank][step]
  std::vector<std::vector<SavedShard>> state;  // [rank] values and moments, host tensors
};

// `then`: a strategy switched to after the first step (DistTrainer::switch_to). comm_on_device:
// the communicators move the device's memory (as NCCL does on a GPU), so the Reshards pack, move
// and unpack device buffers instead of staging through the host.
TrainRun train(const sharding::Strategy& st, int world, bool on_fake_device, const std::string& save = "",
               const sharding::Strategy* then = nullptr, bool comm_on_device = false) {
  const auto model = models::llama(testing::dist_config());
  const sharding::AnnotationPlan plan = model->compile_plan(st);
  const sharding::AnnotationPlan next = then ? model->compile_plan(*then) : plan;
  const data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  TrainRun run;
  run.losses.resize(world);
  run.state.resize(world);
  comm::run_thread_ranks(world, [&](int rank, comm::GroupCache& groups) {
    DistOptions o;
    o.train = testing::dist_options(3);
    o.plan_name = st.name;
    auto memory = std::make_shared<hspmd::testing::FakeDeviceMemory>();
    if (on_fake_device) o.compute = [memory](int) { return testing::fake_device_compute(memory); };
    o.comm_on_device = comm_on_device;
    DistTrainer t(model, ds, plan, o, rank, world, groups);
    while (!t.done()) {
      run.losses[rank].push_back(t.step().loss);
      if (then != nullptr && run.losses[rank].size() == 1) t.switch_to(next, then->name);
    }
    if (on_fake_device) {  // the rank's tensors did live on the device, and crossed to it and back
      EXPECT_GT(memory->in_use, 0u);
      EXPECT_GT(memory->to_device, 0);
      EXPECT_GT(memory->to_host, 0);
      if (world > 1) {  // every rank has Reshards to run; packed on the device only without staging
        if (comm_on_device) EXPECT_GT(memory->region_copies, 0);
        else EXPECT_EQ(memory->region_copies, 0);
      }
    }
    run.state[rank] = t.state_shards();
    if (!save.empty()) t.save(save);
  });
  return run;
}

void expect_same_bits(const TrainRun& device, const TrainRun& host) {
  ASSERT_EQ(device.losses, host.losses);  // exact: the same CPU kernels in the same order
  for (size_t rank = 0; rank < host.state.size(); ++rank) {
    ASSERT_EQ(device.state[rank].size(), host.state[rank].size());
    for (size_t i = 0; i < host.state[rank].size(); ++i) {
      const Tensor& a = device.state[rank][i].data;
      const Tensor& b = host.state[rank][i].data;
      ASSERT_TRUE(a.on_host()) << device.state[rank][i].name;  // checkpoints read host copies
      ASSERT_EQ(a.nbytes(), b.nbytes());
      EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << "rank " << rank << ", "
                                                                         << host.state[rank][i].name;
    }
  }
}

TEST(FakeDeviceTrain, OneRankOnADeviceEqualsTheHostBitForBit) {
  const sharding::Strategy one = testing::strategy(R"({"name": "one", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-3"}]}]})");
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("hspmd-fake-device-" + std::to_string(::getpid()));
  const TrainRun device = train(one, 1, true, dir.string());
  expect_same_bits(device, train(one, 1, false));
  // The device run's checkpoint resumes on the host.
  const data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  Trainer resumed(models::llama(testing::dist_config()), ds, testing::dist_options(3));
  resumed.restore(dir.string());
  EXPECT_EQ(resumed.step_count(), 3);
  std::filesystem::remove_all(dir);
}

TEST(FakeDeviceTrain, TwoTensorParallelRanksOnDevicesEqualTheHostBitForBit) {
  // TP 2 with a vocabulary-parallel loss: activation Reshards, the loss's statistics gather and the
  // gradient syncs all cross the host.
  const sharding::Strategy tp2 = testing::strategy(R"({"name": "tp2", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3"}]}]})");
  expect_same_bits(train(tp2, 2, true), train(tp2, 2, false));
}

TEST(FakeDeviceTrain, TwoContextParallelRanksOnDevicesEqualTheHostBitForBit) {
  // CP 2: each rank's query rows and their packed positions (q_index) on the device, the keys and
  // values gathered (kv_index) and the key gradients reduce-scattered across the host.
  const sharding::Strategy cp2 = testing::strategy(R"({"name": "cp2", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3", "cp": 2}]}]})");
  expect_same_bits(train(cp2, 2, true), train(cp2, 2, false));
}

TEST(FakeDeviceTrain, ASwitchOnDevicesEqualsTheHostBitForBit) {
  // TP 2 to DP 2 after the first step: the switch's BSR moves host copies of the device shards.
  const sharding::Strategy tp2 = testing::strategy(R"({"name": "tp2", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3"}]}]})");
  const sharding::Strategy dp2 = testing::strategy(R"({"name": "dp2", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0", "layers": "0-3"}]},
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "1", "layers": "0-3"}]}]})");
  expect_same_bits(train(tp2, 2, true, "", &dp2), train(tp2, 2, false, "", &dp2));
}

TEST(FakeDeviceTrain, DataParallelWithZero1OnDevicesEqualsTheHostBitForBit) {
  const sharding::Strategy dp2 = testing::strategy(R"({"name": "dp2-zero1", "zero1": true, "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-3"}]},
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "1", "layers": "0-3"}]}]})");
  expect_same_bits(train(dp2, 2, true), train(dp2, 2, false));
}

TEST(FakeDeviceTrain, CommunicatorsOnDeviceMemoryEqualTheHostBitForBit) {
  // No host staging: tensor-parallel activations and gradient syncs (collectives), a pipeline's
  // sends and receives, and ZeRO-1's reduce-scatter run on device buffers.
  const sharding::Strategy tp2 = testing::strategy(R"({"name": "tp2", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3"}]}]})");
  expect_same_bits(train(tp2, 2, true, "", nullptr, true), train(tp2, 2, false));
  const sharding::Strategy pp2 = testing::strategy(R"({"name": "pp2", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-1"},
                                                                {"ranks": "1", "layers": "2-3"}]}]})");
  expect_same_bits(train(pp2, 2, true, "", nullptr, true), train(pp2, 2, false));
  const sharding::Strategy dp2 = testing::strategy(R"({"name": "dp2-zero1", "zero1": true, "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-3"}]},
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "1", "layers": "0-3"}]}]})");
  expect_same_bits(train(dp2, 2, true, "", nullptr, true), train(dp2, 2, false));
}

TEST(FakeDeviceTrain, ASwitchMovesTheStateOnDeviceBuffers) {
  // The fused BSR of a switch (DistTrainer::switch_to) sends and receives the weights and AdamW
  // moments as device buffers, as over NCCL, and the run still equals one process.
  const sharding::Strategy dp2 = testing::strategy(R"({"name": "dp2", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0", "layers": "0-3"}]},
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "1", "layers": "0-3"}]}]})");
  const sharding::Strategy tp2 = testing::strategy(R"({"name": "tp2", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3"}]}]})");
  std::vector<std::shared_ptr<hspmd::testing::FakeDeviceMemory>> fakes(2);
  for (auto& f : fakes) f = std::make_shared<hspmd::testing::FakeDeviceMemory>();
  const testing::DistRun r =
      testing::run_phases({{1, tp2}, {3, dp2}}, testing::dist_options(4),
                          {.configure = [&](int rank, DistOptions& o) {
                            o.compute = [memory = fakes[rank]](int) { return testing::fake_device_compute(memory); };
                            o.comm_on_device = true;
                          }});
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(r.switches[rank].size(), 1u) << "rank " << rank;
    EXPECT_GT(r.switches[rank][0].rank_sent_bytes, 0) << "rank " << rank;
    EXPECT_GT(fakes[rank]->region_copies, 0) << "rank " << rank;
  }
  testing::expect_matches_single_process(r, 4);
}

}  // namespace
}  // namespace hspmd::runtime
