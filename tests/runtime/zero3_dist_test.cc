// ZeRO-3 ("zero": 3) against the single-process oracle: each replica keeps only its shard of the
// master weights, gradients and AdamW moments, and all-gathers each layer's parameters just before
// F, B (and B's recompute) read them (runtime/parameter_gathers.h). Every step's loss and gradient
// norm and the final weights equal the single-process run (relative 1e-5, float32) under DP 2, DP 3
// (shards of uneven sizes), DP x TP x PP, DP x CP (x TP), recompute, GPipe, tied embeddings and bf16, pipelines of
// different shapes (stages, layers, TP degrees), across switches and checkpoints; pipelines of
// different micro-batch counts, or whose holders of a parameter run their passes in different orders,
// are refused. Memory is measured from each rank's allocator: what a rank holds between steps
// (parameters and moments) and its peak in a step.
// Ranks run as threads of this process over Gloo (runtime/dist_run_testlib.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "hspmd/data/packing.h"
#include "hspmd/graph/compute_device.h"
#include "hspmd/models/llama.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/specialize/memory_estimate.h"
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
using testing::RunOptions;
using testing::strategy;
using testing::with_zero;

constexpr int64_t kSteps = 3;

// `n` data-parallel pipelines of one rank each, 2 micro-batches of 1.
std::string data_parallel(int n) {
  std::string out = "[";
  for (int r = 0; r < n; ++r) {
    out += std::string(r ? ", " : "") + R"({"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": ")" +
           std::to_string(r) + R"(", "layers": "0-3"}]})";
  }
  return out + "]";
}

// Two TP 2 x PP 2 pipelines (1F1B, 2 micro-batches each).
const char* kDp2Tp2Pp2 = R"([
  {"micro_batch_size": 1, "num_micro_batches": 2,
   "stages": [{"ranks": "0-1", "layers": "0-1"}, {"ranks": "2-3", "layers": "2-3"}]},
  {"micro_batch_size": 1, "num_micro_batches": 2,
   "stages": [{"ranks": "4-5", "layers": "0-1"}, {"ranks": "6-7", "layers": "2-3"}]}])";

// Pipelines of different shapes (the DS unions of a parameter differ): a 1-stage TP 2 pipeline
// beside a 2-stage TP 1 one with uneven stages (layer 0, then 1-3) and micro-batches twice the size.
// Each parameter's shard is over its 3 holders; each gather builds the TP half or the whole tensor.
const char* kHetero = R"([
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
  {"micro_batch_size": 2, "num_micro_batches": 2,
   "stages": [{"ranks": "2", "layers": "0"}, {"ranks": "3", "layers": "1-3"}]}])";

// 1F1B over 3 pipelines of different stage counts, TP degrees and layer splits whose holders of each
// layer still run their passes in one order (2 micro-batches: stage 0 of 2 and stages 0-1 of 3 run
// F0 F1 B0 B1, the last stages F0 B0 F1 B1).
const char* kHetero1F1B = R"([
  {"micro_batch_size": 1, "num_micro_batches": 2,
   "stages": [{"ranks": "0-1", "layers": "0-1"}, {"ranks": "2-3", "layers": "2-3"}]},
  {"micro_batch_size": 1, "num_micro_batches": 2,
   "stages": [{"ranks": "4", "layers": "0"}, {"ranks": "5", "layers": "1"}, {"ranks": "6", "layers": "2-3"}]}])";

// CP 2 in both pipelines, under 1F1B: the optimizer-state shards are over 4 replicas (2 pipelines x
// 2 CP ranks), the second pipeline's CP group also cut by TP 2.
const char* kDp2Cp2 = R"([
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3", "cp": 2}]},
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2-5", "layers": "0-3", "tp": 2, "cp": 2}]}])";

TEST(Zero3, DataParallelTwoAndThreeEqualOneProcess) {
  expect_matches_single_process(run(with_zero(3, data_parallel(2)), dist_options(kSteps)), kSteps);
  // 3 replicas: the embedding's 260 rows shard 87/87/86, the norms' 32 elements 11/11/10.
  expect_matches_single_process(run(with_zero(3, data_parallel(3)), dist_options(kSteps)), kSteps);
}

TEST(Zero3, TensorAndPipelineParallelEqualsOneProcess) {
  expect_matches_single_process(run(with_zero(3, kDp2Tp2Pp2), dist_options(kSteps)), kSteps);
}

TEST(Zero3, ContextParallelEqualsOneProcess) {
  // Each CP rank gathers the whole layer (its TP part) and reduces its partial gradient into its shard.
  expect_matches_single_process(run(with_zero(3, kDp2Cp2), dist_options(kSteps)), kSteps);
  // Switched from ZeRO-3 over CP to ZeRO-0 without it and back: values and moments leave and re-enter
  // shards cut over CP ranks.
  const DistRun r = run_phases(
      {{1, with_zero(3, kDp2Cp2)}, {2, with_zero(0, data_parallel(2))}, {3, with_zero(3, kDp2Cp2)}}, dist_options(4));
  for (size_t rank = 0; rank < r.switches.size(); ++rank) ASSERT_EQ(r.switches[rank].size(), 2u) << rank;
  expect_matches_single_process(r, 4);
}

TEST(Zero3, RecomputeAndGPipeEqualOneProcess) {
  // Recompute: B replays each layer's forward ops, so it gathers the layer's parameters again.
  expect_matches_single_process(run(with_zero(3, kDp2Tp2Pp2, /*recompute=*/true), dist_options(kSteps)), kSteps);
  expect_matches_single_process(
      run(with_zero(3, kDp2Tp2Pp2), dist_options(kSteps), {.schedule = specialize::ScheduleKind::kGPipe}), kSteps);
}

TEST(Zero3, TiedEmbeddingsEqualOneProcess) {
  // The tied table is read by the first and the last op of F: gathered all the way through.
  expect_matches_single_process(run(with_zero(3, kDp2Tp2Pp2), dist_options(kSteps), {.tied = true}), kSteps, 1,
                                /*tied=*/true);
}

TEST(Zero3, Bf16MixedPrecisionEqualsOneProcessInBf16) {
  // The float32 master shards are gathered, then cast to bf16 by the graph as without ZeRO-3.
  TrainerOptions o = dist_options(kSteps);
  o.precision = DType::kBFloat16;
  expect_matches_single_process(run(with_zero(3, kDp2Tp2Pp2), o), kSteps, 1, false, "", 1e-5, DType::kBFloat16);
}

TEST(Zero3, DispatchGivingPipelinesDifferentMicroBatchCountsIsRefused) {
  // Every segment to pipeline 0: pipeline 1 would gather nothing while pipeline 0 gathers per pass.
  auto all_to_first = [](const std::vector<data::Segment>& global) {
    data::BatchSplit out(2);
    for (const data::Segment& s : global) out[0].push_back({s});
    return out;
  };
  try {
    run(with_zero(3, data_parallel(2)), dist_options(1),
        {.configure = [&](int, DistOptions& d) { d.split_batch = all_to_first; }});
    FAIL() << "a ZeRO-3 step ran with pipelines of different micro-batch counts";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ZeRO-3 (\"zero\": 3) needs every pipeline to run as many micro-batches"),
              std::string::npos)
        << e.what();
  }
}

TEST(Zero3, SwitchesToAndFromOtherStagesEqualOneProcess) {
  // ZeRO-3 under DP 2 -> ZeRO-0 under TP x PP -> ZeRO-3 under DP x TP x PP.
  const DistRun r = run_phases({{1, with_zero(3, data_parallel(2))},
                                {2, with_zero(0, R"([{"micro_batch_size": 1, "num_micro_batches": 4,
   "stages": [{"ranks": "0-1", "layers": "0-1"}, {"ranks": "2-3", "layers": "2-3"}]}])")},
                                {3, with_zero(3, kDp2Tp2Pp2)}},
                               dist_options(4));
  for (size_t rank = 0; rank < r.switches.size(); ++rank) ASSERT_EQ(r.switches[rank].size(), 2u) << rank;
  expect_matches_single_process(r, 4);
}

class Zero3Checkpoint : public testing::TempDirTest {};

TEST_F(Zero3Checkpoint, HeterogeneousPipelinesRoundTrip) {
  // Saved from the shards of pipelines of different shapes, resumed by one rank and by them again.
  TrainerOptions first = dist_options(2);
  first.decay_steps = 4;
  const std::string hetero = path("hetero");
  const RunOptions gpipe{.schedule = specialize::ScheduleKind::kGPipe};
  RunOptions saving = gpipe;
  saving.after = [&](DistTrainer& t) { t.save(hetero); };
  run(with_zero(3, kHetero), first, saving);
  expect_matches_single_process(
      run(with_zero(0, data_parallel(1)), dist_options(4), {.before = [&](DistTrainer& t) { t.restore(hetero); }}), 2,
      3);
  RunOptions restoring = gpipe;
  restoring.before = [&](DistTrainer& t) { t.restore(hetero); };
  expect_matches_single_process(run(with_zero(3, kHetero), dist_options(4), restoring), 2, 3);
}

TEST_F(Zero3Checkpoint, SavedUnderZero3ResumesUnderZero2AndBack) {
  TrainerOptions first = dist_options(2);
  first.decay_steps = 4;  // steps 1-2 here, 3-4 after the restore: one 4-step schedule
  const std::string zero3 = path("zero3"), zero2 = path("zero2");
  run(with_zero(3, kDp2Tp2Pp2), first, {.after = [&](DistTrainer& t) { t.save(zero3); }});
  run(with_zero(2, data_parallel(3)), first, {.after = [&](DistTrainer& t) { t.save(zero2); }});
  expect_matches_single_process(
      run(with_zero(2, data_parallel(2)), dist_options(4), {.before = [&](DistTrainer& t) { t.restore(zero3); }}), 2,
      3);
  expect_matches_single_process(
      run(with_zero(3, data_parallel(3)), dist_options(4), {.before = [&](DistTrainer& t) { t.restore(zero2); }}), 2,
      3);
}

TEST(Zero3, HeterogeneousPipelinesEqualOneProcessAndHoldTheEstimatedShards) {
  const sharding::Strategy st = with_zero(3, kHetero);
  std::vector<graph::ComputeDevice> devices;
  for (int r = 0; r < 4; ++r) devices.push_back(graph::cpu_compute({.name = "rank " + std::to_string(r)}));
  std::vector<size_t> between_steps(4);
  const DistRun r = run(st, dist_options(kSteps),
                        {.schedule = specialize::ScheduleKind::kGPipe,
                         .before = [&](DistTrainer& t) { between_steps[t.rank()] = devices[t.rank()].allocator.current_bytes(); },
                         .configure = [&](int rank, DistOptions& o) {
                           o.compute = [device = devices[rank]](int) { return device; };
                         }});
  expect_matches_single_process(r, kSteps);
  // Between steps a rank holds its shards of the master weights and of the two moments: what the
  // estimate counts for them (the moments' bytes are twice the state shard's).
  const models::LlamaModel model = models::build_llama(dist_config());
  for (int rank = 0; rank < 4; ++rank) {
    const specialize::ExecGraph exec(model.graph, models::compile_llama_plan(dist_config(), st), rank);
    const specialize::MemoryEstimate e = specialize::estimate_memory(exec, {.micro_batch_tokens = 1});
    std::printf("rank %d of the heterogeneous pipelines: between steps %zu B, estimated shards %lld B\n", rank,
                between_steps[rank], static_cast<long long>(e.optimizer_states * 3 / 2));
    EXPECT_EQ(static_cast<int64_t>(between_steps[rank]), e.optimizer_states * 3 / 2) << rank;
  }
}

TEST(Zero3, HeterogeneousPipelinesUnder1F1BEqualOneProcess) {
  expect_matches_single_process(run(with_zero(3, kHetero1F1B), dist_options(kSteps)), kSteps);
}

TEST(Zero3, HeterogeneousPipelinesWithTiedEmbeddingsEqualOneProcess) {
  // The table: whole on the TP 2 stage's F and B, on both stages of the other pipeline.
  expect_matches_single_process(
      run(with_zero(3, kHetero), dist_options(kSteps), {.schedule = specialize::ScheduleKind::kGPipe, .tied = true}),
      kSteps, 1, /*tied=*/true);
}

TEST(Zero3, HoldersRunningTheirPassesInDifferentOrdersAreRefusedByName) {
  // Under 1F1B layer 0's holders disagree: rank 2 (stage 0 of 2) runs F0 F1 B0 B1, ranks 0-1 F0 B0 F1 B1.
  try {
    run(with_zero(3, kHetero), dist_options(1));
    FAIL() << "a ZeRO-3 step ran with holders of a parameter in different pass orders";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ZeRO-3 gathers 'model.embed_tokens.weight' once per pass on each of its "
                                         "holders, in lockstep, but under 1f1b rank 0 (pipeline 0, stage 0 of 1) "
                                         "runs its passes as F0 B0 F1 B1 and rank 2 (pipeline 1, stage 0 of 2) as "
                                         "F0 F1 B0 B1"),
              std::string::npos)
        << e.what();
  }
}

TEST(Zero3, PipelinesOfDifferentMicroBatchCountsAreRefusedByName) {
  const std::string counts = R"([
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-3"}]},
  {"micro_batch_size": 1, "num_micro_batches": 3, "stages": [{"ranks": "1", "layers": "0-3"}]}])";
  try {
    models::compile_llama_plan(dist_config(), with_zero(3, counts));
    FAIL() << "a ZeRO-3 strategy over pipelines of different micro-batch counts compiled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"zero\": 3 needs every pipeline to run as many micro-batches; "
                                         "pipelines[1].num_micro_batches is 3, pipelines[0]'s 2"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(models::compile_llama_plan(dist_config(), with_zero(2, counts)));
}

// What each of 4 data-parallel ranks holds, measured by its allocator: between steps (after
// construction: parameters and moments) and at its peak over the steps.
struct Held {
  std::vector<size_t> between_steps, peak;
};

Held measure(int zero) {
  std::vector<graph::ComputeDevice> devices;
  for (int r = 0; r < 4; ++r) devices.push_back(graph::cpu_compute({.name = "rank " + std::to_string(r)}));
  Held held{std::vector<size_t>(4), {}};
  const DistRun r = run(with_zero(zero, data_parallel(4)), dist_options(2),
                        {.before = [&](DistTrainer& t) { held.between_steps[t.rank()] = devices[t.rank()].allocator.current_bytes(); },
                         .configure = [&](int rank, DistOptions& o) {
                           o.compute = [device = devices[rank]](int) { return device; };
                         }});
  expect_matches_single_process(r, 2);
  held.peak = r.peak_bytes;
  return held;
}

TEST(Zero3, MeasuredParameterAndPeakMemoryBelowTheUnshardedStages) {
  const Held zero0 = measure(0), zero2 = measure(2), zero3 = measure(3);
  for (int rank = 0; rank < 4; ++rank) {
    std::printf("rank %d of dp4: between steps ZeRO-0/2/3 %zu/%zu/%zu B, peak %zu/%zu/%zu B\n", rank,
                zero0.between_steps[rank], zero2.between_steps[rank], zero3.between_steps[rank], zero0.peak[rank],
                zero2.peak[rank], zero3.peak[rank]);
    // Between steps ZeRO-0 holds the parameters and two moments whole (3P), ZeRO-2 the parameters
    // whole and the moments' quarter (1.5P), ZeRO-3 a quarter of all three (0.75P).
    EXPECT_LT(zero3.between_steps[rank], zero2.between_steps[rank] * 6 / 10) << rank;
    EXPECT_LT(zero3.between_steps[rank], zero0.between_steps[rank] * 3 / 10) << rank;
    EXPECT_LT(zero3.peak[rank], zero2.peak[rank]) << rank;
  }
}

// The estimate divides parameters, gradients and moments by the replicas; to the parameters it adds
// the most the gather schedule holds at once, to the gradients the largest parameter's whole one
// twice.
TEST(Zero3, MemoryEstimateDividesByTheReplicas) {
  const models::LlamaModel model = models::build_llama(dist_config());
  auto estimate = [&](int zero) {
    const specialize::ExecGraph exec(model.graph,
                                     models::compile_llama_plan(dist_config(), with_zero(zero, data_parallel(4))), 0);
    return specialize::estimate_memory(exec, {.micro_batch_tokens = dist_options(1).seq_len});
  };
  const specialize::MemoryEstimate zero0 = estimate(0), zero2 = estimate(2), zero3 = estimate(3);
  std::printf("rank 0 of dp4: ZeRO-0 %s\n  ZeRO-2 %s\n  ZeRO-3 %s\n", zero0.to_string().c_str(),
              zero2.to_string().c_str(), zero3.to_string().c_str());
  EXPECT_EQ(zero3.optimizer_states, zero2.optimizer_states);
  EXPECT_EQ(zero3.optimizer_states * 4, zero0.optimizer_states);
  EXPECT_EQ(zero3.activations, zero0.activations);
  // Float32 bytes of the table (260 x 32, as large as the head) and of a decoder layer (hidden 32,
  // intermediate 64, 4 heads and 2 KV heads of 8: q, k, v, o, gate, up, down and two norms). F holds
  // the most at the embedding: the table and layer 0, gathered one layer ahead. B holds the table's
  // whole gradient twice at most (one reduced on the communication thread while B computes the next).
  const int64_t shard = zero0.parameters / 4, table = 260 * 32 * 4;
  const int64_t layer = (32 * 32 + 16 * 32 + 16 * 32 + 32 * 32 + 3 * 64 * 32 + 2 * 32) * 4;
  EXPECT_EQ(zero3.parameters, shard + table + layer);
  EXPECT_EQ(zero3.gradients, shard + 2 * table);
  EXPECT_LT(zero3.total(), zero2.total());
}

}  // namespace
}  // namespace hspmd::runtime
