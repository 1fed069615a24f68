// bf16-only switches (DistOptions::bf16_switches, switching/bf16_switch_plan.h): the master weights
// and AdamW moments stay under the base plan; a step under another plan gets the parameters there as
// bf16 values and sends its float32 gradients back. Checked against the same run with full switches
// (weights and moments moved, float32): the losses, gradient norms and final weights agree within
// the rounding of the parameters to bf16, the state ends in the base layout, the checkpoint has the
// base run's format, and the bytes each step logs are the plan's and fewer than a full switch's.
// Ranks run as threads of this process over Gloo.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "hspmd/comm/thread_ranks.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/runtime/training_log.h"
#include "hspmd/switching/bf16_switch_plan.h"
#include "runtime/dist_run_testlib.h"
#include "runtime/fake_device_compute_testlib.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

using testing::dist_config;
using testing::DistRun;
using testing::Phase;
using testing::relative_difference;
using testing::run_phases;
using testing::strategy;
using testing::with_zero;
using ::testing::HasSubstr;

constexpr int64_t kSteps = 4;

// Base: every layer tensor-parallel over ranks 0-1. Compute: a two-stage pipeline over the same
// ranks, so both moves cross ranks (rank 0 lacks half of layers 0-1's weights; it holds all of their
// gradients, half of which rank 1 steps).
const char* kTp2 = R"({"name": "tp2", "pipelines": [
  {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3"}]}]})";
const char* kPp2 = R"({"name": "pp2", "pipelines": [
  {"micro_batch_size": 1, "num_micro_batches": 4,
   "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1", "layers": "2-3"}]}]})";

std::vector<Phase> alternating() {
  return {{1, strategy(kTp2)}, {2, strategy(kPp2)}, {3, strategy(kTp2)}, {4, strategy(kPp2)}};
}

TrainerOptions bf16_options() {
  TrainerOptions o = testing::dist_options(kSteps);
  o.precision = DType::kBFloat16;
  return o;
}

// Every rank's state shards (tensor name -> region), recorded at the end of a run.
using ShardRegions = std::map<int, std::map<std::string, std::string>>;

testing::RunOptions recording(bool bf16_switches, ShardRegions& regions, const std::string& checkpoint) {
  return {.after =
              [&regions, checkpoint](DistTrainer& t) {
                if (!checkpoint.empty()) t.save(checkpoint);  // collective: before the lock
                std::map<std::string, std::string> mine;
                for (const SavedShard& s : t.state_shards()) mine[s.name] = s.region.to_string();
                static std::mutex mutex;  // the ranks are threads
                std::lock_guard<std::mutex> lock(mutex);
                regions[t.rank()] = mine;
              },
          .configure = [bf16_switches](int, DistOptions& o) { o.bf16_switches = bf16_switches; }};
}

// File name -> size: the checkpoint's format (which tensors, sharded how, in which files).
std::map<std::string, uintmax_t> files_of(const std::filesystem::path& dir) {
  std::map<std::string, uintmax_t> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[std::filesystem::relative(e.path(), dir).string()] = e.file_size();
  }
  return out;
}

std::vector<switching::ParamLayout> layouts(const char* json) {
  return switching::param_layouts(models::compile_llama_plan(dist_config(), strategy(json)),
                                  models::parameter_shapes(*models::llama(dist_config())));
}

// A run with bf16-only switches against the same phases with full switches: losses within relative
// 2e-3, gradient norms 1e-2, each weight tensor 1e-2 (the reasons and measured gaps at the tests);
// step 1 runs under the base in both, step 2 computes on bf16 copies of the weights.
void expect_within_bf16_rounding(const DistRun& bf16, const DistRun& full) {
  ASSERT_EQ(bf16.losses[0].size(), static_cast<size_t>(kSteps));
  for (int64_t k = 0; k < kSteps; ++k) {
    for (size_t rank = 0; rank < bf16.losses.size(); ++rank) {
      EXPECT_NEAR(bf16.losses[rank][k], full.losses[rank][k], 2e-3 * std::abs(full.losses[rank][k]))
          << "rank " << rank << " step " << k + 1;
      EXPECT_NEAR(bf16.grad_norms[rank][k], full.grad_norms[rank][k], 1e-2 * full.grad_norms[rank][k])
          << "rank " << rank << " step " << k + 1;
    }
  }
  EXPECT_EQ(bf16.losses[0][0], full.losses[0][0]) << "step 1 runs under the base in both runs";
  EXPECT_NE(bf16.losses[0][1], full.losses[0][1]) << "step 2 computes on bf16 copies of the weights";
  ASSERT_EQ(bf16.weights.size(), full.weights.size());
  for (const auto& [name, w] : full.weights) {
    EXPECT_LT(relative_difference(bf16.weights.at(name), w), 1e-2) << name;
  }
}

class Bf16Switch : public testing::TempDirTest {};

TEST_F(Bf16Switch, MatchesFullSwitchesWithinBf16RoundingAndKeepsTheBaseLayout) {
  ShardRegions bf16_regions, full_regions, base_regions;
  const DistRun bf16 = run_phases(alternating(), bf16_options(), recording(true, bf16_regions, path("bf16")));
  const DistRun full = run_phases(alternating(), bf16_options(), recording(false, full_regions, ""));
  const DistRun base = run_phases({{1, strategy(kTp2)}}, bf16_options(), recording(false, base_regions, path("tp2")));

  // Bounds: under pp2 the embedding and norm weights, which no bf16 kernel rounds (the matmul and
  // attention operands are rounded either way), compute with their bf16 values, a relative change of
  // up to 2^-9 each; from step 3 on the weights differ too, updated from gradients of those copies
  // (AdamW's division by sqrt(v) enlarges small gradient differences, testing::relative_difference).
  // Measured on this run: losses 2.5e-4, gradient norms 3.6e-3, weights 4.0e-3 (layer 1's q_proj)
  // apart. A wrong slice, a lost gradient or a step's update missing moves them by far more.
  expect_within_bf16_rounding(bf16, full);

  // The master state never left the base layout, and the checkpoint is the base run's, file for file.
  EXPECT_EQ(bf16_regions, base_regions);
  EXPECT_NE(full_regions, base_regions) << "the full-switch run ends in pp2's layout";
  EXPECT_EQ(files_of(path("bf16")), files_of(path("tp2")));
}

TEST_F(Bf16Switch, StepsLogThePlannedBytesFewerThanAFullSwitch) {
  ShardRegions unused;
  const DistRun bf16 = run_phases(alternating(), bf16_options(), recording(true, unused, ""));
  const DistRun full = run_phases(alternating(), bf16_options(), recording(false, unused, ""));

  const switching::Bf16SwitchPlan plan = switching::plan_bf16_switch(layouts(kTp2), layouts(kPp2), nullptr);
  // The same slices as float32 values: bf16 sends exactly half their bytes.
  const switching::SwitchPlan float32_values =
      switching::plan_switch(layouts(kTp2), layouts(kPp2), {.optimizer_states = false});
  EXPECT_GT(plan.params_out.bsr.total_bytes(), 0);
  EXPECT_GT(plan.grads_back.bsr.total_bytes(), 0);
  EXPECT_EQ(2 * plan.params_out.bsr.total_bytes(), float32_values.bsr.total_bytes());

  for (size_t rank = 0; rank < bf16.steps.size(); ++rank) {
    for (int64_t k = 0; k < kSteps; ++k) {
      const StepMetrics& m = bf16.steps[rank][k];
      if (k % 2 == 0) {
        EXPECT_FALSE(m.bf16_switch.has_value()) << "step " << k + 1 << " runs under the base";
        continue;
      }
      ASSERT_TRUE(m.bf16_switch.has_value()) << "rank " << rank << " step " << k + 1;
      const Bf16SwitchTraffic& t = *m.bf16_switch;
      EXPECT_EQ(t.plan, "pp2");
      EXPECT_EQ(t.base, "tp2");
      EXPECT_EQ(t.params_out_by_tier, plan.params_out.sent_by_tier);
      EXPECT_EQ(t.params_out_wire_by_tier, plan.params_out.sent_by_tier) << "measured on the wire";
      EXPECT_EQ(t.grads_back_by_tier, plan.grads_back.sent_by_tier);
      EXPECT_EQ(t.grads_back_wire_by_tier, plan.grads_back.sent_by_tier) << "measured on the wire";
      EXPECT_EQ(m.to_json()["bf16_switch"]["params_out_bytes"], plan.params_out.bsr.total_bytes());
      EXPECT_THAT(step_line(m, kSteps), HasSubstr("bf16 switch tp2 -> pp2: params out"));
    }
  }
  // A full switch moves weights and both moments, float32, each way: one pair of them costs more
  // than a step's bf16 parameters and float32 gradients.
  ASSERT_EQ(full.switches[0].size(), 3u);
  for (size_t i = 0; i < full.switches[0].size(); ++i) {
    EXPECT_GT(full.switches[0][i].sent_bytes, plan.step_bytes()) << "full switch " << i + 1;
  }
  ASSERT_EQ(bf16.switches[0].size(), 3u);
  const SwitchReport& to_pp2 = bf16.switches[0][0];
  EXPECT_TRUE(to_pp2.bf16_only);
  EXPECT_EQ(to_pp2.sent_bytes, 0) << "a bf16-only switch moves nothing by itself";
  EXPECT_EQ(to_pp2.params_out_bytes, plan.params_out.bsr.total_bytes());
  EXPECT_EQ(to_pp2.grads_back_bytes, plan.grads_back.bsr.total_bytes());
  EXPECT_THAT(to_pp2.to_string(), HasSubstr("bf16 only: weights and Adam moments stay under plan tp2"));
  EXPECT_THAT(bf16.switches[0][1].to_string(), HasSubstr("steps compute on them again"));
}

// The base under ZeRO-3 (two TP 2 pipelines: values and moments sharded over the pipelines), steps
// computing under CP 2 x TP 2 with sequence parallelism, under the base, and across pipelines of other
// shapes under ZeRO-2: the parameters go out from value shards, the gradients come back into them,
// within the same bounds of a full-switch run as above, and the state stays in the base layout.
TEST_F(Bf16Switch, FromAZero3BaseToContextParallelSequenceParallelAndHeterogeneousPlans) {
  const sharding::Strategy base = with_zero(3, R"([
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2-3", "layers": "0-3"}]}])");
  const std::vector<Phase> phases{{1, base},
                                  {2, strategy(R"({"name": "cp2-tp2-sp", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 2,
     "stages": [{"ranks": "0-3", "layers": "0-3", "tp": 2, "cp": 2, "sequence_parallel": true}]}]})")},
                                  {3, base},
                                  {4, with_zero(2, R"([
    {"micro_batch_size": 1, "num_micro_batches": 3, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
    {"micro_batch_size": 2, "num_micro_batches": 2,
     "stages": [{"ranks": "2", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}])")}};
  ShardRegions bf16_regions, full_regions, base_regions;
  const DistRun bf16 = run_phases(phases, bf16_options(), recording(true, bf16_regions, ""));
  const DistRun full = run_phases(phases, bf16_options(), recording(false, full_regions, ""));
  run_phases({{1, base}}, bf16_options(), recording(false, base_regions, ""));
  // Measured on this run: losses 2.5e-4 (step 4), gradient norms 3.6e-3 (step 2), weights 4.2e-3
  // (layer 1's q_proj) apart.
  expect_within_bf16_rounding(bf16, full);
  EXPECT_EQ(bf16_regions, base_regions);
}

// A GPU rank's path (runtime/fake_device_compute_testlib.h: device tensors behind the CPU kernels):
// the parameters are rounded on the host, and they and the gradients move through the host staging
// buffers (communicators that move host memory, Gloo's) or as device buffers (communicators that
// move the device's, as NCCL's), the received values on the device. The same kernels in the same
// order: the same bits.
TEST_F(Bf16Switch, OnDevicesEqualsTheHostBitForBit) {
  ShardRegions unused;
  const DistRun host = run_phases(alternating(), bf16_options(), recording(true, unused, ""));
  for (const bool comm_on_device : {false, true}) {
    SCOPED_TRACE(comm_on_device ? "communicators on device memory" : "host staging");
    const DistRun device =
        run_phases(alternating(), bf16_options(), {.configure = [comm_on_device](int, DistOptions& o) {
                     o.bf16_switches = true;
                     o.comm_on_device = comm_on_device;
                     auto memory = std::make_shared<hspmd::testing::FakeDeviceMemory>();
                     o.compute = [memory](int) { return testing::fake_device_compute(memory); };
                   }});
    EXPECT_EQ(device.losses, host.losses);
    ASSERT_TRUE(device.steps[0][1].bf16_switch.has_value());
    EXPECT_EQ(device.steps[0][1].bf16_switch->params_out_wire_by_tier,
              host.steps[0][1].bf16_switch->params_out_wire_by_tier);
    for (const auto& [name, w] : host.weights) EXPECT_EQ(relative_difference(device.weights.at(name), w), 0.0) << name;
  }
}

// Elastic recovery's calls on a run with bf16-only switches (elastic::ElasticRun drives them across
// processes; here the ranks are threads). 4 ranks keep the state under dp2-pp2 (every slice on two
// ranks) and compute step 2 under tp2-pp2 on bf16 copies. With `fail`, step 2 fails on every rank
// once its totals are committed (as when a rank dies between the commit and the update) and rank 3
// leaves: the survivors apply the step from the gradients they moved back to the base
// (finish_interrupted_step) and move the base's full state to a plan without rank 3, taking rank
// 3's slices from rank 1's replica (switch_state_to). Without, the 4 ranks take step 2 and move
// their full state to that plan (rank 3 a spare). Either way steps 3 and 4 run on the moved state.
struct Recovered {
  std::vector<std::vector<double>> losses;        // per rank, per step
  std::vector<std::vector<SavedShard>> state;     // per rank, at the end
  std::vector<std::vector<bool>> bf16_moves;      // per rank, per step: it moved bf16 copies
};

Recovered bf16_step_then_full_move(bool fail) {
  const auto model = models::llama(dist_config());
  const sharding::Strategy dp2_pp2 = strategy(R"({"name": "dp2-pp2", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1", "layers": "2-3"}]},
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}]})");
  const sharding::Strategy tp2_pp2 = strategy(R"({"name": "tp2-pp2", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 4, "stages": [{"ranks": "0-1", "layers": "0-1"}, {"ranks": "2-3", "layers": "2-3"}]}]})");
  const sharding::Strategy survivors = strategy(R"({"name": "survivors", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1", "layers": "2-3"}]},
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2", "layers": "0-3"}]}]})");
  const data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  constexpr int64_t kFailingStep = 2;
  Recovered run;
  run.losses.resize(4);
  run.state.resize(4);
  run.bf16_moves.resize(4);
  comm::run_thread_ranks(4, [&](int rank, comm::GroupCache& groups) {
    DistOptions o;
    o.train = bf16_options();
    o.plan_name = dp2_pp2.name;
    o.bf16_switches = true;
    DistTrainer t(model, ds, model->compile_plan(dp2_pp2), o, rank, 4, groups);
    std::optional<std::vector<double>> committed;
    t.set_commits({.step = [&](int64_t step, const std::vector<double>& totals) {
                     if (!fail || step != kFailingStep) return;
                     committed = totals;
                     throw Error("rank 3 died after step " + std::to_string(step) + " was committed");
                   },
                   .switch_done = {}});
    auto record = [&](const StepMetrics& m) {
      run.losses[rank].push_back(m.loss);
      run.bf16_moves[rank].push_back(m.bf16_switch.has_value());
    };
    record(t.step());
    EXPECT_TRUE(t.switch_to(model->compile_plan(tp2_pp2), tp2_pp2.name).bf16_only);
    std::vector<int> dead;
    if (fail) {
      EXPECT_THROW(t.step(), Error);
      ASSERT_TRUE(committed.has_value());
      if (rank == 3) return;
      groups.reset(1);
      const InterruptedStep settled = t.finish_interrupted_step({0, 1, 2}, committed);
      EXPECT_TRUE(settled.rolled_forward);
      EXPECT_EQ(t.step_count(), kFailingStep);
      run.losses[rank].push_back(settled.metrics.loss);
      run.bf16_moves[rank].push_back(true);  // the step computed under tp2-pp2
      dead = {3};
    } else {
      record(t.step());
    }
    const SwitchReport moved =
        t.switch_state_to(model->compile_plan(survivors), survivors.name, resolve::BsrAlgorithm::kFusedHeuristic, dead);
    EXPECT_FALSE(moved.bf16_only);
    EXPECT_EQ(moved.from, "dp2-pp2") << "the full state moves from the base, not from the bf16 copies' plan";
    EXPECT_GT(moved.sent_bytes, 0);  // rank 2 takes layers 2-3 from rank 1
    EXPECT_EQ(t.plan_name(), "survivors");
    while (!t.done()) record(t.step());
    run.state[rank] = t.state_shards();
  });
  return run;
}

TEST_F(Bf16Switch, RecoveryAppliesTheCommittedStepInTheBaseAndMovesTheFullState) {
  const Recovered failed = bf16_step_then_full_move(true);
  const Recovered healthy = bf16_step_then_full_move(false);
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    ASSERT_EQ(failed.losses[rank].size(), 4u);
    // The same operations on the same values: the same bits. A step applied from gradients in the
    // compute layout, a bf16 copy kept past the recovery or a slice taken from the wrong rank would
    // change them.
    EXPECT_EQ(failed.losses[rank], healthy.losses[rank]);
    EXPECT_EQ(failed.bf16_moves[rank], (std::vector<bool>{false, true, false, false}))
        << "after the full move the steps compute on the master state under the new base";
    EXPECT_EQ(healthy.bf16_moves[rank], failed.bf16_moves[rank]);
    ASSERT_EQ(failed.state[rank].size(), healthy.state[rank].size());
    for (size_t i = 0; i < healthy.state[rank].size(); ++i) {
      const SavedShard &f = failed.state[rank][i], &h = healthy.state[rank][i];
      EXPECT_EQ(f.name, h.name);
      EXPECT_EQ(f.region, h.region) << h.name;
      EXPECT_EQ(relative_difference(f.data, h.data), 0.0) << h.name;
    }
  }
}

TEST_F(Bf16Switch, NeedsBf16Precision) {
  TrainerOptions o = testing::dist_options(1);
  ShardRegions unused;
  try {
    run_phases({{1, strategy(kTp2)}}, o, recording(true, unused, ""));
    FAIL() << "a float32 run accepted bf16-only switches";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("--switch-states bf16-params"));
    EXPECT_THAT(e.what(), HasSubstr("need --precision bf16"));
  }
}

}  // namespace
}  // namespace hspmd::runtime
