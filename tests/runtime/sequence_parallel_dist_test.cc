// Sequence parallelism as an annotation (a stage's "sequence_parallel": true, models/llama_plan.cc):
// the activations between TP blocks are split by tokens inside the TP group, so deduction and
// resolution turn the TP all-reduces after the row-parallel matmuls into reduce-scatters and add an
// all-gather before the column-parallel ones. Checked by structure (the plan report's resolutions)
// and against the single-process oracle: every step's loss and gradient norm and the final weights
// agree (relative 1e-5, float32) under SP x TP, SP x TP x PP, SP next to a pipeline without it, and
// SP x CP x TP. Ranks run as threads of this process over Gloo (runtime/dist_run_testlib.h).
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
using testing::expect_matches_single_process;
using testing::run;
using testing::strategy;

constexpr int64_t kSteps = 3;

const char* kTp2 = R"({"name": "sp-tp2", "pipelines": [{"micro_batch_size": 2, "num_micro_batches": 2,
  "stages": [{"ranks": "0-1", "layers": "0-3", "sequence_parallel": true}]}]})";

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
}

}  // namespace
}  // namespace hspmd::runtime
