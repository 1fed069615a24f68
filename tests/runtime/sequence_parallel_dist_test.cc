// Sequence parallelism as an annotation (a stage's "sequence_parallel": true, models/llama_plan.cc):
// the activations between TP blocks are split by tokens inside the TP group, so deduction and
// resolution turn the TP all-reduces after the row-parallel matmuls into reduce-scatters and add an
// all-gather before the column-parallel ones. Checked by structure (the plan report's resolutions)
// and against the single-process oracle: every step's loss and gradient norm and the final weights
// agree (relative 1e-5, float32) under SP x TP, SP x TP x PP, SP next to a pipeline without it,
// SP x CP x TP, pipelines whose stages have other TP degrees (SP stages handing over to TP 1 ones and
// back), switches on and off, and ZeRO-3; micro-batches whose tokens the TP group cannot split are
// refused by name. Ranks run as threads of this process over Gloo (runtime/dist_run_testlib.h).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/specialize/plan_report.h"
#include "runtime/dist_run_testlib.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

using testing::dist_config;
using testing::dist_options;
using testing::DistRun;
using testing::expect_matches_single_process;
using testing::run;
using testing::run_phases;
using testing::strategy;
using testing::with_zero;

constexpr int64_t kSteps = 3;

const char* kTp2 = R"({"name": "sp-tp2", "pipelines": [{"micro_batch_size": 2, "num_micro_batches": 2,
  "stages": [{"ranks": "0-1", "layers": "0-3", "sequence_parallel": true}]}]})";

// Stages of other TP degrees in both pipelines: a TP 2 SP stage hands its token-split output to a TP 1
// stage, and a TP 1 stage hands its whole output to a TP 2 SP one; the pipelines' micro-batch sizes
// differ.
const char* kHeteroTp = R"([
  {"micro_batch_size": 1, "num_micro_batches": 2,
   "stages": [{"ranks": "0-1", "layers": "0-1", "sequence_parallel": true}, {"ranks": "2", "layers": "2-3"}]},
  {"micro_batch_size": 2, "num_micro_batches": 2,
   "stages": [{"ranks": "3", "layers": "0"}, {"ranks": "4-5", "layers": "1-3", "sequence_parallel": true}]}])";

// Two data-parallel TP 2 pipelines with SP.
const char* kDp2Tp2 = R"([
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3", "sequence_parallel": true}]},
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2-3", "layers": "0-3", "sequence_parallel": true}]}])";

// The classification of each listed Reshard of layer 0 and of the embedding, by name.
std::map<std::string, std::string> classifications(const sharding::Strategy& st) {
  const specialize::PlanReport r = specialize::make_plan_report(
      models::Llama(dist_config()).build({}), models::compile_llama_plan(dist_config(), st), {.seq_len = 16});
  std::map<std::string, std::string> out;
  for (const specialize::ReshardGroup& g : r.activations) out[g.display_name()] = g.classification;
  return out;
}

TEST(SequenceParallel, ResolvesToAllGatherAndReduceScatterInsteadOfAllReduces) {
  const auto without = classifications(strategy(R"({"name": "tp2", "pipelines": [{"micro_batch_size": 2,
    "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3"}]}]})"));
  const auto with = classifications(strategy(kTp2));
  // Without SP: the row-parallel outputs are all-reduced, the column-parallel inputs need nothing.
  EXPECT_EQ(without.at("model.layers.{0..3}.attn_out"), "bottom[AR]");
  EXPECT_EQ(without.at("model.layers.{0..3}.mlp_out"), "bottom[AR]");
  EXPECT_EQ(without.count("model.layers.{0..3}.attn_in"), 0u);
  EXPECT_EQ(without.at("model.embed_out"), "bottom[AR]");
  // With SP: reduce-scatters by tokens, all-gathers before the column-parallel matmuls, the last
  // layer's output gathered for the head; their backward Reshards the other way round.
  EXPECT_EQ(with.at("model.layers.{0..3}.attn_out"), "bottom[RS]");
  EXPECT_EQ(with.at("model.layers.{0..3}.mlp_out"), "bottom[RS]");
  EXPECT_EQ(with.at("model.layers.{0..3}.attn_in"), "bottom[AG]");
  EXPECT_EQ(with.at("model.layers.{0..3}.mlp_in"), "bottom[AG]");
  EXPECT_EQ(with.at("model.layers.3.output"), "bottom[AG]");
  EXPECT_EQ(with.at("model.embed_out"), "bottom[RS]");
  for (const auto& [name, cls] : with) EXPECT_EQ(cls.find("AR"), std::string::npos) << name << " " << cls;
}

TEST(SequenceParallel, TensorParallelEqualsOneProcess) {
  expect_matches_single_process(run(strategy(kTp2), dist_options(kSteps)), kSteps);
}

TEST(SequenceParallel, TensorAndPipelineParallelNextToAPipelineWithoutItEqualsOneProcess) {
  // SP on both TP stages of the first pipeline (its stage boundary moves token-split activations),
  // a TP 2 pipeline without SP beside it, and ZeRO-2 across the two.
  expect_matches_single_process(run(strategy(R"({"name": "sp-tp2-pp2", "zero": 2, "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2,
     "stages": [{"ranks": "0-1", "layers": "0-1", "sequence_parallel": true},
                {"ranks": "2-3", "layers": "2-3", "sequence_parallel": true}]},
    {"micro_batch_size": 1, "num_micro_batches": 2,
     "stages": [{"ranks": "4-5", "layers": "0-3"}]}]})"),
                                    dist_options(kSteps)),
                                kSteps);
}

TEST(SequenceParallel, CombinesWithContextParallelism) {
  // CP 2 x TP 2: each CP rank's tokens are cut in two over its TP group.
  expect_matches_single_process(run(strategy(R"({"name": "sp-cp2-tp2", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 1,
     "stages": [{"ranks": "0-3", "layers": "0-3", "tp": 2, "cp": 2, "sequence_parallel": true}]}]})"),
                                    dist_options(kSteps)),
                                kSteps);
  // A CP 2 x TP 2 SP stage handing over to a TP 2 SP stage (tokens split 4 ways, then 2), beside a
  // one-rank pipeline, under ZeRO-3 (GPipe: one pass order on every holder).
  expect_matches_single_process(run(with_zero(3, R"([
    {"micro_batch_size": 1, "num_micro_batches": 2,
     "stages": [{"ranks": "0-3", "layers": "0-1", "tp": 2, "cp": 2, "sequence_parallel": true},
                {"ranks": "4-5", "layers": "2-3", "sequence_parallel": true}]},
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "6", "layers": "0-3"}]}])"),
                                    dist_options(kSteps), {.schedule = specialize::ScheduleKind::kGPipe}),
                                kSteps);
}

TEST(SequenceParallel, PipelinesWithStagesOfOtherTensorParallelDegreesEqualOneProcess) {
  expect_matches_single_process(run(with_zero(0, kHeteroTp), dist_options(kSteps)), kSteps);
  // ZeRO-2 across them: the norms' gradients, partial over an SP stage's TP ranks, are reduced
  // into shards held by ranks of other TP degrees.
  expect_matches_single_process(run(with_zero(2, kHeteroTp), dist_options(kSteps)), kSteps);
}

TEST(SequenceParallel, SwitchesOnAndOffEqualOneProcess) {
  // SP x TP -> TP x PP without SP -> SP stages of other TP degrees under ZeRO-2.
  const DistRun r = run_phases({{1, strategy(kTp2)},
                                {2, strategy(R"({"name": "tp2-pp2", "pipelines": [{"micro_batch_size": 1,
    "num_micro_batches": 4, "stages": [{"ranks": "0-1", "layers": "0-1"}, {"ranks": "2-3", "layers": "2-3"}]}]})")},
                                {3, with_zero(2, kHeteroTp)}},
                               dist_options(4));
  for (size_t rank = 0; rank < r.switches.size(); ++rank) ASSERT_EQ(r.switches[rank].size(), 2u) << rank;
  expect_matches_single_process(r, 4);
}

TEST(SequenceParallel, UnderZero3EqualsOneProcess) {
  // The gathered parameters of an SP stage are read by its token-split norms and its TP matmuls alike.
  expect_matches_single_process(run(with_zero(3, kDp2Tp2), dist_options(kSteps)), kSteps);
  // Across stages of other TP degrees each gather builds a TP half or a whole tensor from the shards.
  // GPipe: every holder of a layer runs its passes in one order (1F1B would not, and is refused).
  expect_matches_single_process(
      run(with_zero(3, kHeteroTp), dist_options(kSteps), {.schedule = specialize::ScheduleKind::kGPipe}), kSteps);
}

// A micro-batch whose tokens the TP group cannot split evenly is refused before any step, naming the
// first token-split tensor and the extent that does not divide.
TEST(SequenceParallel, TokensTheGroupCannotSplitAreRefusedByName) {
  TrainerOptions o = dist_options(1);
  o.seq_len = 63;
  try {
    run(with_zero(0, kDp2Tp2), o);
    FAIL() << "an SP stage of TP 2 ran micro-batches of 63 tokens";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'model.embed_out'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("extent 63 of dim 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("is not divisible into 2 parts"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hspmd::runtime
