// Context parallelism against the single-process oracle (docs/context-parallelism.md): stages whose
// tokens are split over CP ranks (zigzag chunks of every packed row of documents of different
// lengths, K/V all-gathered per layer, their gradients reduce-scattered, weight gradients summed over
// CP) train like one process: every step's loss and gradient norm and the final weights agree
// (relative 1e-5, float32). Ranks run as threads of this process over Gloo (dist_run_testlib.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hspmd/data/context_parallel.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/specialize/plan_report.h"
#include "runtime/dist_run_testlib.h"

namespace hspmd::runtime {
namespace {

using testing::expect_matches_single_process;
using testing::run;
using testing::strategy;

constexpr int64_t kSteps = 3;

TEST(ContextParallel, Cp2) {
  sharding::Strategy st = strategy(R"({"name": "cp2", "pipelines": [
    {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3", "cp": 2}]}]})");
  expect_matches_single_process(run(st, testing::dist_options(kSteps)), kSteps);
}

TEST(ContextParallel, Cp2Tp2) {
  sharding::Strategy st = strategy(R"({"name": "cp2-tp2", "pipelines": [
    {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "0-3", "layers": "0-3", "tp": 2, "cp": 2}]}]})");
  expect_matches_single_process(run(st, testing::dist_options(kSteps)), kSteps);
}

// Tied embeddings: the head's gradient (partial over CP) adds to the lookup's on the same stage.
TEST(ContextParallel, Cp2TiedEmbeddings) {
  sharding::Strategy st = strategy(R"({"name": "cp2-tp2-tied", "pipelines": [
    {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "0-3", "layers": "0-3", "tp": 2, "cp": 2}]}]})");
  expect_matches_single_process(run(st, testing::dist_options(kSteps), {.tied = true}), kSteps, 1, /*tied=*/true);
}

// CP in a pipeline of two stages next to a plain data-parallel replica: the hand-over between CP
// stages carries each CP rank's own tokens, and the gradients meet across both pipelines.
TEST(ContextParallel, Cp2PipelineBesideAPlainReplica) {
  sharding::Strategy st = strategy(R"({"name": "cp2-pp2+dp", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2,
     "stages": [{"ranks": "0-1", "layers": "0-1", "cp": 2}, {"ranks": "2-3", "layers": "2-3", "cp": 2}]},
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "4", "layers": "0-3"}]}]})");
  expect_matches_single_process(run(st, testing::dist_options(kSteps)), kSteps);
}

// Graph switching into and out of CP: weights and Adam moments move like any other layout change.
TEST(ContextParallel, SwitchesFromTensorParallelToCpAndBack) {
  sharding::Strategy tp = strategy(R"({"name": "tp2", "pipelines": [
    {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]}]})");
  sharding::Strategy cp = strategy(R"({"name": "cp2-tp2", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "0-3", "layers": "0-3", "tp": 2, "cp": 2}]}]})");
  expect_matches_single_process(testing::run_phases({{1, tp}, {2, cp}, {4, tp}}, testing::dist_options(4)), 4);
}

}  // namespace
}  // namespace hspmd::runtime
