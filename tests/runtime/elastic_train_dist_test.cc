// `hspmd train --elastic` with real worker processes and real SIGKILLs (HSPMD_FAULT places each
// at a chosen point of a chosen step, runtime/fault_injection.h): the run must finish, every
// step's loss must equal a single-process run's (--check-single) and the final weights the
// single-process run's final weights (rel 1e-5), whether the state comes from surviving replicas
// (one fused BSR) or from the newest complete checkpoint. Llama's recovery is tested at every phase
// a worker can die in; the decoder families (configs/{qwen3,mistral,gemma3}-tiny.json) at one, with
// the same checks, since recovery sees a model only through the model contract (qwen2 too).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "hspmd/models/model_factory.h"
#include "hspmd/runtime/sharded_checkpoint.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::run_hspmd;

constexpr int kSteps = 6;

// Two pipelines of two stages, no ZeRO: every slice of the state lives on two ranks.
constexpr const char* kDataParallelStrategy = R"({"name": "dp2-pp2", "zero1": false,
  "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1", "layers": "2-3"}]},
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}]})";

// The same pipelines with sequence parallelism: two TP 2 pipelines (each layer on every rank).
constexpr const char* kSequenceParallelStrategy = R"({"name": "dp2-tp2-sp", "zero": 0,
  "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3", "sequence_parallel": true}]},
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2-3", "layers": "0-3", "sequence_parallel": true}]}]})";

struct Failure {
  const char* fault;  // HSPMD_FAULT
  const char* phase;  // how the log names where the victim died
};

class ElasticTrain : public testing::TempDirTest {
 protected:
  std::string example(const std::string& rel) const { return (testing::source_dir() / rel).string(); }
  // The model trained (a config under the source tree).
  std::string model_config = "configs/llama-tiny.json";
  // A small learning rate: Adam turns the float rounding of near-zero gradient elements into whole
  // steps of lr, so a larger one makes even a failure-free distributed run differ from one process
  // by more than 1e-5 in a few tensors. How much depends on the GEMM kernels' summation order:
  // measured largest tensor difference at lr 2.5e-4: 5.6e-6 with oneDNN's AVX-512 kernels, 1.2e-6
  // with its AVX2 ones (at 5e-4: 1.1e-5 on AVX-512; at the default rate 3e-5 on AVX2).
  std::string common() const {
    return "train --model " + example(model_config) + " --data " + testing::corpus_dataset() +
           " --steps " + std::to_string(kSteps) + " --seq-len 64 --global-batch-tokens 256 --warmup 2 --lr 2.5e-4 --min-lr 2.5e-5 --threads 1";
  }
  // The elastic re-planning prices every model by the Llama-tiny profile: its fits are per decoder
  // layer and per token, and the families' tiny configs have as many layers, narrower (the plan
  // chosen may differ from the fastest; recovery must be exact whatever it is).
  std::string elastic(const std::string& strategy) const {
    return common() + " --nproc 4 --strategy " + strategy + " --elastic --cluster " +
           example("examples/clusters/local-hetero-4.json") + " --profile " +
           example("examples/profiles/local-hetero-4-llama-tiny.json") + " --heartbeat-timeout 3 --check-single";
  }
  // bf16 with bf16-only switches: the state stays under --strategy, steps from 4 on compute under
  // TP 2 x PP 2 on bf16 copies.
  std::string bf16_switching() const {
    return " --precision bf16 --switch-states bf16-params --switch 4:" +
           example("examples/strategies/local-tp2-pp2.json");
  }
  // Runs `args` with HSPMD_FAULT set to `faults`.
  testing::CommandResult run_with_faults(const std::string& faults, const std::string& args) const {
    ::setenv("HSPMD_FAULT", faults.c_str(), 1);
    testing::CommandResult r = run_hspmd(args);
    ::unsetenv("HSPMD_FAULT");
    return r;
  }
  // The final weights of `dir` equal those of one process trained on the same data, with the same
  // `flags` (a precision), within `tolerance` (relative, over each whole tensor).
  void expect_single_process_weights(const std::string& dir, const std::string& flags = "",
                                     double tolerance = 1e-5) {
    const std::string reference = path("single");
    if (!std::filesystem::exists(reference)) {
      const testing::CommandResult r = run_hspmd(common() + flags + " --save " + reference);
      ASSERT_EQ(r.code, 0) << r.output;
    }
    const std::shared_ptr<const models::Model> model = models::load_model(example(model_config));
    const graph::TensorMap expected = read_checkpoint_weights(reference, *model);
    const graph::TensorMap got = read_checkpoint_weights(dir, *model);
    ASSERT_EQ(got.size(), expected.size());
    for (const auto& [name, e] : expected) {
      // Over the whole tensor, as every distributed test compares weights: Adam turns float
      // rounding of a near-zero gradient into a visible change of that one element.
      const Tensor& g = got.at(name);
      ASSERT_EQ(g.numel(), e.numel()) << name;
      double diff = 0, norm = 0;
      for (int64_t i = 0; i < e.numel(); ++i) {
        const double a = g.data<float>()[i], b = e.data<float>()[i];
        diff += (a - b) * (a - b);
        norm += b * b;
      }
      // A key bias (qwen2) starts at 0 with a gradient near 0 (the softmax cancels the shift q.b it
      // adds to a query's logits; only RoPE leaves a remainder), so rounding is a large part of its
      // AdamW updates: measured up to 2.0e-4 on qwen2-tiny, the same without any failure.
      EXPECT_LE(std::sqrt(diff / norm), name.ends_with(".k_proj.bias") ? std::max(1e-3, tolerance) : tolerance)
          << name;
    }
  }
  // `strategy_json` (the replicated dp2-pp2 unless given) written to a file of the test's directory.
  std::string strategy_file(const char* strategy_json) {
    const std::string file = path("strategy.json");
    std::ofstream(file) << strategy_json;
    return file;
  }
  void expect_recovery(const Failure& f, const char* strategy_json = kDataParallelStrategy,
                       const std::string& extra_flags = "");
  void expect_recovery_from_checkpoint(int zero_stage, const std::string& fault_point);
};

// The run of `strategy_json` (with `extra_flags`) killed as `f` says, switched before step 4: the
// survivors re-plan, take the dead rank's state from its replica, train on and end with one
// process's losses and weights.
void ElasticTrain::expect_recovery(const Failure& f, const char* strategy_json, const std::string& extra_flags) {
  // A switch before step 4 gives the "switch" fault a switch to die in.
  const std::string switch_flag = " --switch 4:" + example("examples/strategies/local-tp2-pp2.json");
  const testing::CommandResult r = run_with_faults(
      f.fault, elastic(strategy_file(strategy_json)) + switch_flag + extra_flags + " --save " + path("ckpt"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(std::string("HSPMD_FAULT: killing myself (SIGKILL) in ") + f.phase));
  EXPECT_THAT(r.output, HasSubstr("failed with signal 9 (Killed); --elastic: 3 local workers keep running"));
  EXPECT_THAT(r.output, HasSubstr("state moved from surviving replicas"));
  EXPECT_THAT(r.output, HasSubstr("losses match the single-process run"));
  EXPECT_THAT(r.output, HasSubstr("PASS"));
  expect_single_process_weights(path("ckpt"));
}

class KillInPhase : public ElasticTrain, public ::testing::WithParamInterface<Failure> {};

TEST_P(KillInPhase, SurvivorsReplanAndMatchOneProcess) { expect_recovery(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Phases, KillInPhase,
                         ::testing::Values(Failure{"1:3:forward", "forward of step 3"},
                                           Failure{"2:3:backward", "backward of step 3"},
                                           Failure{"2:3:grad-sync", "grad-sync of step 3"},
                                           Failure{"3:3:optimizer", "optimizer of step 3"},
                                           Failure{"3:4:switch", "switch of step 4"}),
                         [](const auto& info) {
                           std::string name = std::string(info.param.fault).substr(4);
                           std::erase(name, '-');
                           return name;
                         });

// Each decoder family recovers as Llama does: a worker killed in the backward of step 3 (its
// q/k norms, Gemma's extra norms and embedding scale, the sliding windows, 16 of the 64-token
// sequences, all move with the state).
class FamilyRecovery : public ElasticTrain, public ::testing::WithParamInterface<std::string> {};

TEST_P(FamilyRecovery, SurvivorsReplanAndMatchOneProcess) {
  model_config = "configs/" + GetParam() + "-tiny.json";
  expect_recovery({"2:3:backward", "backward of step 3"});
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyRecovery, ::testing::Values("qwen3", "qwen2", "mistral", "gemma3"));

// Sequence parallelism: the dead rank's TP half of every layer lives on the other pipeline's rank of
// the same TP index; the state moves as without SP (its annotations only change activations).
TEST_F(ElasticTrain, SequenceParallelStateMovesFromSurvivingReplicas) {
  expect_recovery({"2:3:backward", "backward of step 3"}, kSequenceParallelStrategy);
}

// Small gradient buckets (several per rank, reduced on the communication thread while B goes on):
// the victim dies on that thread after a parameter's sync; the survivors' threads fail their
// running bucket, drop the queued ones, and the step settles before re-planning.
TEST_F(ElasticTrain, SmallGradientBucketsKilledInTheirSyncRecover) {
  expect_recovery({"2:3:grad-sync", "grad-sync of step 3"}, kDataParallelStrategy, " --grad-bucket-mb 0.004");
}

// ZeRO-1 shards the Adam moments: a dead rank's slices exist nowhere else, so the survivors restore
// the newest complete checkpoint under their new plan and replay the data. The first victim dies
// while the step-4 checkpoint is being written: the step-2 one must still be whole and is used;
// a second victim later forces a second fallback.
TEST_F(ElasticTrain, StateWithoutReplicaComesFromTheNewestCompleteCheckpoint) {
  const testing::CommandResult r =
      run_with_faults("1:4:save,2:5:backward", elastic(example("examples/strategies/local-hetero-4.json")) +
                                                  " --save " + path("ckpt") + " --save-every 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("in save of step 4"));
  EXPECT_THAT(r.output, HasSubstr("in backward of step 5"));
  EXPECT_THAT(r.output, HasSubstr("state restored from the newest checkpoint; resumes after step 2"));
  EXPECT_THAT(r.output, HasSubstr("resumes after step 4"));  // the re-planned strategy keeps replicas
  EXPECT_THAT(r.output, HasSubstr("PASS"));
  expect_single_process_weights(path("ckpt"));
}

// Under ZeRO `zero_stage` (of kDataParallelStrategy) rank 1 dies in step 3 at `fault_point`:
// its shards exist nowhere else, so the survivors restore the newest complete checkpoint (step 2's)
// and end with the single process's weights.
void ElasticTrain::expect_recovery_from_checkpoint(int zero_stage, const std::string& fault_point) {
  std::string zero = kDataParallelStrategy;
  zero.replace(zero.find(R"("zero1": false)"), 14, R"("zero": )" + std::to_string(zero_stage));
  const testing::CommandResult r = run_with_faults(
      "1:3:" + fault_point, elastic(strategy_file(zero.c_str())) + " --save " + path("ckpt") + " --save-every 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("in " + fault_point + " of step 3"));
  EXPECT_THAT(r.output, HasSubstr("state restored from the newest checkpoint; resumes after step 2"));
  EXPECT_THAT(r.output, HasSubstr("PASS"));
  expect_single_process_weights(path("ckpt"));
}

// ZeRO-3 shards the master weights as well: a dead rank's value shards exist nowhere else either,
// so the survivors fall back to the newest complete checkpoint the same way.
TEST_F(ElasticTrain, Zero3StateComesFromTheNewestCompleteCheckpoint) {
  expect_recovery_from_checkpoint(3, "backward");
}

// ZeRO-2 shards the moments as ZeRO-1 does and reduces each micro-batch's gradients into them during
// B: the victim dies in that reduction (on the communication thread) with the step's shards half
// accumulated; the survivors drop them and restore the newest complete checkpoint.
TEST_F(ElasticTrain, Zero2StateComesFromTheNewestCompleteCheckpoint) {
  expect_recovery_from_checkpoint(2, "grad-sync");
}

// The launcher restarts the dead worker (--max-restarts); it joins at a step boundary, the run
// re-plans with it and gives it state in the same kind of fused BSR.
TEST_F(ElasticTrain, RestartedWorkerRejoinsAndTakesPartAgain) {
  const testing::CommandResult r = run_with_faults(
      "1:2:backward", elastic(strategy_file(kDataParallelStrategy)) + " --max-restarts 1 --save " + path("ckpt"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("restarting rank 1 (restart 1 of 1)"));
  EXPECT_THAT(r.output, HasSubstr("recovery: ranks [1] lost"));
  EXPECT_THAT(r.output, HasSubstr("recovery: ranks [1] join; members [0,1,2,3]"));
  EXPECT_THAT(r.output, HasSubstr("rank 1: joined the run after step"));
  EXPECT_THAT(r.output, Not(HasSubstr("rank 1: spare under plan elastic-gen2")));  // it trains again
  EXPECT_THAT(r.output, HasSubstr("PASS"));
  expect_single_process_weights(path("ckpt"));
}

// bf16-only switches (--switch-states bf16-params): before step 4 the run switches to TP 2 x PP 2
// moving nothing; the master weights and Adam moments stay under dp2-pp2 and each step under
// tp2-pp2 computes on bf16 copies. A worker dies in step 5: the survivors drop the copies and move
// the base's full state to the re-planned strategy, which becomes the base. Killed in the backward,
// step 5 is redone under the re-plan; killed in its optimizer (after step 5's commit), the others
// finish step 5 and lose step 6 in its params-out move. (A committed step the survivors have not
// applied yet is Bf16Switch.RecoveryAppliesTheCommittedStepInTheBaseAndMovesTheFullState, where the
// failure is placed exactly between the commit and the update.) Losses and weights are held to a
// bf16 single process as the bf16 switch tests hold them (bf16_switch_dist_test.cc): losses 2e-3
// (--check-single), weights 1e-2.
class Bf16SwitchRecovery : public ElasticTrain, public ::testing::WithParamInterface<Failure> {};

TEST_P(Bf16SwitchRecovery, SurvivorsMoveTheBaseStateAndMatchOneProcess) {
  const std::string strategy = path("dp2-pp2.json");
  std::ofstream(strategy) << kDataParallelStrategy;
  const testing::CommandResult r =
      run_with_faults(GetParam().fault, elastic(strategy) + bf16_switching() + " --save " + path("ckpt"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("bf16 only: weights and Adam moments stay under plan dp2-pp2"));
  EXPECT_THAT(r.output, HasSubstr("| bf16 switch dp2-pp2 -> local-tp2-pp2: params out"));
  EXPECT_THAT(r.output, HasSubstr(std::string("HSPMD_FAULT: killing myself (SIGKILL) in ") + GetParam().phase));
  EXPECT_THAT(r.output, HasSubstr("state moved from surviving replicas"));
  EXPECT_THAT(r.output, HasSubstr(": plan dp2-pp2 -> elastic-gen1 (specialized now), one fused BSR"))
      << "recovery moves the full state from the base";
  EXPECT_THAT(r.output, HasSubstr("(tolerance 2e-03): PASS"));
  expect_single_process_weights(path("ckpt"), " --precision bf16", 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Phases, Bf16SwitchRecovery,
                         ::testing::Values(Failure{"2:5:backward", "backward of step 5"},
                                           Failure{"3:5:optimizer", "optimizer of step 5"}),
                         [](const auto& info) { return std::string(info.param.fault).substr(4); });

// With bf16-only switches a restarted worker rejoins as well: the switch that admits it moves the
// full state (it holds nothing, not even a base layout), whether or not the run computes on bf16
// copies under the --switch strategy at that moment.
TEST_F(ElasticTrain, RestartedWorkerRejoinsABf16SwitchingRun) {
  const std::string strategy = path("dp2-pp2.json");
  std::ofstream(strategy) << kDataParallelStrategy;
  const testing::CommandResult r = run_with_faults(
      "1:2:backward", elastic(strategy) + bf16_switching() + " --max-restarts 1 --save " + path("ckpt"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("recovery: ranks [1] lost"));
  EXPECT_THAT(r.output, HasSubstr("recovery: ranks [1] join; members [0,1,2,3]"));
  EXPECT_THAT(r.output, HasSubstr("rank 1: joined the run after step"));
  EXPECT_THAT(r.output, HasSubstr("(tolerance 2e-03): PASS"));
  expect_single_process_weights(path("ckpt"), " --precision bf16", 1e-2);
}

TEST_F(ElasticTrain, LostStateWithoutCheckpointIsAClearError) {
  const testing::CommandResult r =
      run_with_faults("2:3:backward", elastic(example("examples/strategies/local-hetero-4.json")));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.output, HasSubstr("no (live) source device owns it"));
  EXPECT_THAT(r.output, HasSubstr("there is no complete checkpoint to fall back to (give --save DIR --save-every N)"));
}

TEST_F(ElasticTrain, ElasticNeedsTheClusterAndProfile) {
  const testing::CommandResult r = run_hspmd(common() + " --nproc 4 --strategy " +
                                             example("examples/strategies/local-hetero-4.json") + " --elastic");
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.output, HasSubstr("--elastic re-plans for the survivors with the planner: give --cluster"));
}

}  // namespace
}  // namespace hspmd::runtime
