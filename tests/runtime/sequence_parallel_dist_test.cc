// Sequence parallelism as an annotation (a stage's "sequence_parallel": true, models/llama_plan.cc):
// the activations between TP blocks are split by tokens inside the TP group, so deduction and
// resolution turn the TP all-reduces after the row-parallel matmuls into reduce-scatters and add an
// all-gather before the column-parallel ones. Checked by structure (the plan report's resolutions)
// and against the single-process oracle: every step's loss and gradient norm and the final weights
// agree (relative 1e-5, float32) under SP x TP, SP x TP x PP, SP next to a pipeline without it,
// SP x CP x TP, pipelines whose stages have other TP degrees (SP stages handing over to TP 1 ones and
// back), switches on and off, and ZeRO-3, and on packed rows of any token count (padded per row to
// the SP stages' TP x CP); a plan without that padding is refused by name. Ranks run as threads of this process over Gloo (runtime/dist_run_testlib.h).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "hspmd/comm/thread_ranks.h"
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

// Packed rows of up to 63 tokens (kPacked does not pad): each row of a pipeline with SP stages is
// padded to a multiple of their TP x CP with a padding document of its own (ignored targets), so
// the losses over the real tokens, the norms and the weights equal one process on the unpadded rows.
TEST(SequenceParallel, RowsTheGroupCannotSplitArePaddedAndEqualOneProcess) {
  TrainerOptions o = dist_options(kSteps);
  o.seq_len = 63;
  const data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  Trainer single(models::llama(dist_config()), ds, o);
  std::vector<StepMetrics> expected;
  while (!single.done()) expected.push_back(single.step());
  const graph::TensorMap weights = single.parameters();
  const auto expect_matches = [&](const DistRun& r, double weights_tolerance) {
    testing::expect_steps_match(r.steps, expected);
    ASSERT_EQ(r.weights.size(), weights.size());
    for (const auto& [name, w] : weights) {
      EXPECT_LT(testing::relative_difference(r.weights.at(name), w), weights_tolerance) << name;
    }
  };
  expect_matches(run(with_zero(0, kDp2Tp2), o), 1e-5);  // rows padded to even counts
  // The next two pipelines' weights differ from one process's by 1.05e-5 (layer 0's gate_proj) with
  // SP and without it alike (without SP: no SP padding; measured on this machine), AdamW enlarging
  // reassociation (see relative_difference): the padding adds nothing to it.
  // CP 2 x TP 2 (rows padded to multiples of 4 for the zigzag and the 4-way split alike) handing
  // over to a TP 2 SP stage, under ZeRO-2.
  expect_matches(run(with_zero(2, R"([{"micro_batch_size": 2, "num_micro_batches": 1, "stages": [
    {"ranks": "0-3", "layers": "0-1", "tp": 2, "cp": 2, "sequence_parallel": true},
    {"ranks": "4-5", "layers": "2-3", "sequence_parallel": true}]}])"),
                     o),
                 2e-5);
  expect_matches(run(with_zero(0, kHeteroTp), o), 2e-5);  // SP stages next to TP 1 ones
}

// A plan whose pipelines do not carry the SP stages' row multiple (one written by hand without
// "sequence_parallel_multiple") feeds its rows unpadded: a micro-batch whose tokens the TP group
// cannot split is refused before any step, naming the first token-split tensor and the extent.
TEST(SequenceParallel, APlanWithoutTheRowMultipleIsRefusedByName) {
  TrainerOptions o = dist_options(1);
  o.seq_len = 63;
  sharding::AnnotationPlan plan = models::compile_llama_plan(dist_config(), with_zero(0, kDp2Tp2));
  ASSERT_EQ(plan.pipelines.at(0).sequence_parallel_multiple, 2);
  for (sharding::PipelineSchedule& p : plan.pipelines) p.sequence_parallel_multiple = 1;
  const data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  try {
    comm::run_thread_ranks(4, [&](int rank, comm::GroupCache& groups) {
      DistOptions options;
      options.train = o;
      DistTrainer t(models::llama(dist_config()), ds, plan, options, rank, 4, groups);
      t.step();
    });
    FAIL() << "an SP stage of TP 2 ran unpadded micro-batches of 63 tokens";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'model.embed_out'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("extent 63 of dim 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("is not divisible into 2 parts"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hspmd::runtime
