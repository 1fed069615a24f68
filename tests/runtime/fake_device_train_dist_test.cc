// The trainer's device paths without a GPU: ranks whose tensors live on a fake device
// (runtime/fake_device_compute_testlib.h: the CPU kernels behind device tensors) train exactly as
// host ranks do. This runs what a GPU rank does around its kernels: parameters initialized on the
// host and copied in, feeds copied in, the loss copied out, gradients summed and AdamW through the
// ComputeDevice, Reshards and the vocabulary-parallel loss's gather staged through host buffers (or,
// with comm_on_device, packed and moved as device buffers), checkpoints written from host copies,
// switches, and what elastic recovery does to the state (an interrupted step applied, the state
// moved without a dead rank, or restored from a checkpoint under a new plan).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
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

TEST(FakeDeviceTrain, AStepReadsTheDeviceOnTheHostOnce) {
  // The losses of both micro-batches and every gradient's squares add up on the device and cross
  // to the host together (the Reshards' host staging is no read of the trainer's: one rank has none).
  const auto model = models::llama(testing::dist_config());
  const sharding::Strategy one = testing::strategy(R"({"name": "one", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-3"}]}]})");
  const data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  comm::run_thread_ranks(1, [&](int rank, comm::GroupCache& groups) {
    DistOptions o;
    o.train = testing::dist_options(2);
    o.plan_name = one.name;
    const graph::ComputeDevice device = testing::fake_device_compute(std::make_shared<hspmd::testing::FakeDeviceMemory>());
    o.compute = [device](int) { return device; };  // copies share the wait counter
    DistTrainer t(model, ds, model->compile_plan(one), o, rank, 1, groups);
    ASSERT_GT(t.state_shards().size(), 2u);
    for (int64_t step = 1; !t.done(); ++step) {
      t.step();
      EXPECT_EQ(device.host_waits->load(), step) << "step " << step;
    }
  });
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

// Where a rank computes and what its communicators move (the recovery tests below).
enum class Ranks { kHost, kDeviceStaged, kDeviceMemory };

// Sets `o` up for `where`; the fake device's counters, checked by expect_device_used.
std::shared_ptr<hspmd::testing::FakeDeviceMemory> place(DistOptions& o, Ranks where) {
  auto memory = std::make_shared<hspmd::testing::FakeDeviceMemory>();
  if (where != Ranks::kHost) {
    o.compute = [memory](int) { return testing::fake_device_compute(memory); };
    o.comm_on_device = where == Ranks::kDeviceMemory;
  }
  return memory;
}

void expect_device_used(const hspmd::testing::FakeDeviceMemory& memory, Ranks where) {
  if (where == Ranks::kHost) return;
  EXPECT_GT(memory.in_use, 0u);
  EXPECT_GT(memory.to_device, 0);
  EXPECT_GT(memory.to_host, 0);
  if (where == Ranks::kDeviceMemory) EXPECT_GT(memory.region_copies, 0);
  else EXPECT_EQ(memory.region_copies, 0);
}

// What a worker's death leaves the survivors to do with their trainers (elastic::ElasticRun drives
// these calls across processes; here the ranks are threads, and the last one leaves).
//
// From replicas: 4 ranks train dp2-pp2 (every slice of the state on two ranks). Step 2 fails on
// every rank once its totals are committed (the commit throws, as when a rank dies between the
// commit and the update); rank 3 leaves. The survivors regroup as generation 1, apply the step
// with the committed totals (finish_interrupted_step), and move the state to a plan of their own
// with one fused BSR that leaves rank 3 out (its shards come from rank 1's replica); then they
// train steps 3 and 4.
TrainRun recover_from_replicas(Ranks where) {
  const auto model = models::llama(testing::dist_config());
  const sharding::Strategy dp2_pp2 = testing::strategy(R"({"name": "dp2-pp2", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1", "layers": "2-3"}]},
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}]})");
  const sharding::Strategy survivors = testing::strategy(R"({"name": "survivors", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1", "layers": "2-3"}]},
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2", "layers": "0-3"}]}]})");
  const sharding::AnnotationPlan plan = model->compile_plan(dp2_pp2), replanned = model->compile_plan(survivors);
  const data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  constexpr int64_t kFailingStep = 2;
  TrainRun run;
  run.losses.resize(4);
  run.state.resize(4);
  comm::run_thread_ranks(4, [&](int rank, comm::GroupCache& groups) {
    DistOptions o;
    o.train = testing::dist_options(4);
    o.plan_name = dp2_pp2.name;
    const auto memory = place(o, where);
    DistTrainer t(model, ds, plan, o, rank, 4, groups);
    std::optional<std::vector<double>> committed;
    t.set_commits({.step = [&](int64_t step, const std::vector<double>& totals) {
      if (step != kFailingStep) return;
      committed = totals;
      throw Error("rank 3 died after step " + std::to_string(step) + " was committed");
    },
                   .switch_done = {}});
    run.losses[rank].push_back(t.step().loss);
    EXPECT_THROW(t.step(), Error);
    ASSERT_TRUE(committed.has_value());
    if (rank == 3) return;
    groups.reset(1);
    const InterruptedStep settled = t.finish_interrupted_step({0, 1, 2}, committed);
    EXPECT_TRUE(settled.rolled_forward);
    EXPECT_EQ(t.step_count(), kFailingStep);
    run.losses[rank].push_back(settled.metrics.loss);
    const SwitchReport moved = t.switch_to(replanned, survivors.name, resolve::BsrAlgorithm::kFusedHeuristic, {3});
    EXPECT_GT(moved.sent_bytes, 0);  // rank 2 takes layers 2-3 from rank 1
    while (!t.done()) run.losses[rank].push_back(t.step().loss);
    expect_device_used(*memory, where);
    run.state[rank] = t.state_shards();
  });
  return run;
}

// From a checkpoint: 2 ranks train pp2 (no replica) and save after step 2; rank 1 leaves after step
// 3. Rank 0's switch to a plan of its own finds layers 2-3 lost (StateLost before any byte moves),
// so it restores the checkpoint under that plan (restore_under) and trains steps 3 and 4 again.
TrainRun recover_from_checkpoint(Ranks where, const std::string& dir) {
  const auto model = models::llama(testing::dist_config());
  const sharding::Strategy pp2 = testing::strategy(R"({"name": "pp2", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1", "layers": "2-3"}]}]})");
  const sharding::Strategy alone = testing::strategy(R"({"name": "alone", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0", "layers": "0-3"}]}]})");
  const sharding::AnnotationPlan plan = model->compile_plan(pp2), replanned = model->compile_plan(alone);
  const data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  TrainRun run;
  run.losses.resize(2);
  run.state.resize(2);
  comm::run_thread_ranks(2, [&](int rank, comm::GroupCache& groups) {
    DistOptions o;
    o.train = testing::dist_options(4);
    o.plan_name = pp2.name;
    const auto memory = place(o, where);
    DistTrainer t(model, ds, plan, o, rank, 2, groups);
    for (int step = 1; step <= 3; ++step) {
      run.losses[rank].push_back(t.step().loss);
      if (step == 2) t.save(dir);
    }
    if (rank == 1) return;
    groups.reset(1);
    const InterruptedStep settled = t.finish_interrupted_step({0}, std::nullopt);
    EXPECT_FALSE(settled.in_progress);
    EXPECT_THROW(t.switch_to(replanned, alone.name, resolve::BsrAlgorithm::kFusedHeuristic, {1}), StateLost);
    t.restore_under(replanned, alone.name, dir);
    EXPECT_EQ(t.step_count(), 2);
    while (!t.done()) run.losses[rank].push_back(t.step().loss);
    expect_device_used(*memory, where);
    run.state[rank] = t.state_shards();
  });
  return run;
}

TEST(FakeDeviceTrain, RecoveryFromReplicasOnDevicesEqualsTheHostBitForBit) {
  const TrainRun host = recover_from_replicas(Ranks::kHost);
  ASSERT_EQ(host.losses[0].size(), 4u);
  for (const Ranks where : {Ranks::kDeviceStaged, Ranks::kDeviceMemory}) {
    SCOPED_TRACE(where == Ranks::kDeviceStaged ? "host staging" : "communicators on device memory");
    expect_same_bits(recover_from_replicas(where), host);
  }
}

TEST(FakeDeviceTrain, RecoveryFromACheckpointOnDevicesEqualsTheHostBitForBit) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("hspmd-fake-device-recovery-" + std::to_string(::getpid()));
  const TrainRun host = recover_from_checkpoint(Ranks::kHost, (dir / "host").string());
  ASSERT_EQ(host.losses[0].size(), 5u);  // steps 1-3, then 3 and 4 again from the checkpoint
  for (const Ranks where : {Ranks::kDeviceStaged, Ranks::kDeviceMemory}) {
    SCOPED_TRACE(where == Ranks::kDeviceStaged ? "host staging" : "communicators on device memory");
    const std::string sub = where == Ranks::kDeviceStaged ? "staged" : "memory";
    expect_same_bits(recover_from_checkpoint(where, (dir / sub).string()), host);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hspmd::runtime
