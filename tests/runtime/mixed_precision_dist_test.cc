// bf16 mixed precision under every kind of strategy: a bf16 distributed run equals the bf16
// single-process run (losses, gradient norms and assembled float32 weights), the same oracle as
// float32 (runtime/dist_run_testlib.h, which explains its bf16 bounds). Rounding to bf16 is per
// element, so it commutes with sharding; only the float32 sums are reassociated, as in float32
// runs, and the rare operand next to a bf16 rounding boundary may round the other way.
// A switch under bf16 moves the float32 master state: the same bytes as a float32 run's switch.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "hspmd/models/llama_model.h"
#include "hspmd/runtime/dist_trainer.h"
#include "runtime/dist_run_testlib.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

using testing::DistRun;
using testing::expect_matches_single_process;
using testing::run;
using testing::run_phases;
using testing::strategy;

constexpr int64_t kSteps = 3;

TrainerOptions bf16_options(int64_t steps) {
  TrainerOptions o = testing::dist_options(steps);
  o.precision = DType::kBFloat16;
  return o;
}

void expect_matches_bf16_single_process(const DistRun& r, int64_t steps) {
  expect_matches_single_process(r, steps, 1, false, "", 1e-5, DType::kBFloat16);
}

TEST(MixedPrecisionDist, DataParallel) {
  expect_matches_bf16_single_process(run(strategy(R"({"name": "dp2", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0", "layers": "0-3"}]},
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "1", "layers": "0-3"}]}]})"),
                                         bf16_options(kSteps)),
                                     kSteps);
}

TEST(MixedPrecisionDist, TensorParallel) {
  expect_matches_bf16_single_process(run(strategy(R"({"name": "tp2", "pipelines": [
    {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]}]})"),
                                         bf16_options(kSteps)),
                                     kSteps);
}

TEST(MixedPrecisionDist, TensorParallelFusedHead) {
  expect_matches_bf16_single_process(run(strategy(R"({"name": "tp2", "pipelines": [
    {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]}]})"),
                                         bf16_options(kSteps),
                                         {.configure = [](int, DistOptions& o) { o.fused_head_loss = true; }}),
                                     kSteps);
}

TEST(MixedPrecisionDist, Pipeline) {
  expect_matches_bf16_single_process(run(strategy(R"({"name": "pp2", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 4,
     "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1", "layers": "2-3"}]}]})"),
                                         bf16_options(kSteps)),
                                     kSteps);
}

TEST(MixedPrecisionDist, Zero1AcrossHeterogeneousPipelines) {
  // ZeRO-1 over a TP-2 pipeline and a one-rank pipeline with its own micro-batch size.
  expect_matches_bf16_single_process(run(strategy(R"({"name": "zero1-hetero", "zero1": true, "pipelines": [
    {"micro_batch_size": 3, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
    {"micro_batch_size": 1, "num_micro_batches": 1, "stages": [{"ranks": "2", "layers": "0-3"}]}]})"),
                                         bf16_options(kSteps)),
                                     kSteps);
}

TEST(MixedPrecisionDist, Bf16DiffersFromFloat32BeyondTheBounds) {
  // The oracle must be able to tell: the bf16 and float32 single-process runs part by more than
  // the bounds a bf16 distributed run is held to (1e-4 on losses, 1e-2 on weights).
  data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  Trainer fp32(models::llama(testing::dist_config()), ds, testing::dist_options(kSteps));
  Trainer bf16(models::llama(testing::dist_config()), ds, bf16_options(kSteps));
  double worst_loss = 0;
  for (int64_t s = 0; s < kSteps; ++s) {
    const double b = bf16.step().loss, f = fp32.step().loss;
    worst_loss = std::max(worst_loss, std::abs(b - f) / f);
  }
  double worst_weights = 0;
  const graph::TensorMap wf = fp32.parameters(), wb = bf16.parameters();
  for (const auto& [name, w] : wf) worst_weights = std::max(worst_weights, testing::relative_difference(wb.at(name), w));
  EXPECT_GT(worst_loss, 1e-4);
  EXPECT_LT(worst_loss, 1e-2) << "bf16 rounding is small";
  EXPECT_GT(worst_weights, 1e-2);
  std::cout << "bf16 vs float32 after " << kSteps << " steps: losses " << worst_loss << ", weights " << worst_weights
            << " (relative)\n";
}

TEST(MixedPrecisionDist, SwitchMovesTheFloat32MasterState) {
  const sharding::Strategy tp2 = strategy(R"({"name": "tp2", "pipelines": [
    {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]}]})");
  const sharding::Strategy pp2 = strategy(R"({"name": "pp2", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 2,
     "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1", "layers": "2-3"}]}]})");
  const DistRun bf16 = run_phases({{1, tp2}, {3, pp2}}, bf16_options(4));
  expect_matches_single_process(bf16, 4, 1, false, "", 1e-5, DType::kBFloat16);
  const DistRun fp32 = run_phases({{1, tp2}, {3, pp2}}, testing::dist_options(4));
  ASSERT_EQ(bf16.switches[0].size(), 1u);
  ASSERT_EQ(fp32.switches[0].size(), 1u);
  const SwitchReport& b = bf16.switches[0][0];
  const SwitchReport& f = fp32.switches[0][0];
  EXPECT_GT(b.sent_bytes, 0);
  EXPECT_EQ(b.sent_bytes, f.sent_bytes) << "weights and both AdamW moments move in float32 under bf16 too";
  EXPECT_EQ(b.local_copy_bytes, f.local_copy_bytes);
}

}  // namespace
}  // namespace hspmd::runtime
