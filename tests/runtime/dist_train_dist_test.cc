// Distributed training against the single-process oracle: for each strategy, every step's loss and
// the final weights equal those of the single-process Trainer on the same data (relative 1e-5,
// float32). Ranks run as threads of this process over Gloo (runtime/dist_run_testlib.h).
#include "hspmd/runtime/dist_trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "hspmd/data/token_dataset.h"
#include "hspmd/models/llama.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/comm/thread_ranks.h"
#include "runtime/dist_run_testlib.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

using specialize::ScheduleKind;
using ::testing::AllOf;
using ::testing::HasSubstr;

using testing::DistRun;
using testing::expect_matches_single_process;
using testing::run;
using testing::RunOptions;
using testing::strategy;

models::LlamaConfig config(bool tied = false) { return testing::dist_config(tied); }
TrainerOptions options(int64_t steps) { return testing::dist_options(steps); }

constexpr int64_t kSteps = 3;

TEST(DistTrain, DataParallel) {
  sharding::Strategy st = strategy(R"({"name": "dp2", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0", "layers": "0-3"}]},
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "1", "layers": "0-3"}]}]})");
  expect_matches_single_process(run(st, options(kSteps)), kSteps);
}

TEST(DistTrain, TensorParallel) {
  sharding::Strategy st = strategy(R"({"name": "tp2", "pipelines": [
    {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]}]})");
  // The loss is vocab-parallel: each rank normalizes its half of the logits with the other's row statistics.
  const models::LlamaModel m = models::build_llama(config());
  const specialize::ExecGraph rank0(m.graph, models::compile_llama_plan(config(), st), 0);
  ASSERT_EQ(rank0.vocab_shard_ranks(m.loss.op), (std::vector<int>{0, 1}));
  expect_matches_single_process(run(st, options(kSteps)), kSteps);
}

TEST(DistTrain, PipelineGPipe) {
  sharding::Strategy st = strategy(R"({"name": "pp2", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 4,
     "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1", "layers": "2-3"}]}]})");
  expect_matches_single_process(run(st, options(kSteps), {.schedule = ScheduleKind::kGPipe}), kSteps);
}

TEST(DistTrain, Pipeline1F1B) {
  sharding::Strategy st = strategy(R"({"name": "pp3", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 4,
     "stages": [{"ranks": "0", "layers": "0"}, {"ranks": "1", "layers": "1-2"}, {"ranks": "2", "layers": "3"}]}]})");
  expect_matches_single_process(run(st, options(kSteps), {.schedule = ScheduleKind::k1F1B}), kSteps);
}

TEST(DistTrain, DataTensorPipeline) {
  sharding::Strategy st = strategy(R"({"name": "dp2-tp2-pp2", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2,
     "stages": [{"ranks": "0-1", "layers": "0-1"}, {"ranks": "2-3", "layers": "2-3"}]},
    {"micro_batch_size": 1, "num_micro_batches": 2,
     "stages": [{"ranks": "4-5", "layers": "0-1"}, {"ranks": "6-7", "layers": "2-3"}]}]})");
  expect_matches_single_process(run(st, options(kSteps)), kSteps);
}

TEST(DistTrain, HeterogeneousTensorParallel) {
  sharding::Strategy st = strategy(R"({"name": "hetero-tp", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
    {"micro_batch_size": 1, "num_micro_batches": 1, "stages": [{"ranks": "2", "layers": "0-3"}]}]})");
  expect_matches_single_process(run(st, options(kSteps)), kSteps);
}

TEST(DistTrain, UnevenPipelinesWithTheirOwnMicroBatches) {
  // Three stages with uneven layer splits next to two stages (one of them TP 2); micro-batch
  // sizes and counts differ between the pipelines.
  sharding::Strategy st = strategy(R"({"name": "uneven", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 3,
     "stages": [{"ranks": "0", "layers": "0"}, {"ranks": "1", "layers": "1-2"}, {"ranks": "2", "layers": "3"}]},
    {"micro_batch_size": 2, "num_micro_batches": 2,
     "stages": [{"ranks": "3-4", "layers": "0-2"}, {"ranks": "5", "layers": "3"}]}]})");
  expect_matches_single_process(run(st, options(kSteps)), kSteps);
}

TEST(DistTrain, Zero1AcrossDifferentTensorParallelDegrees) {
  sharding::Strategy st = strategy(R"({"name": "zero1-hetero", "zero1": true, "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "2", "layers": "0-3"}]}]})");
  expect_matches_single_process(run(st, options(kSteps)), kSteps);
}

TEST(DistTrain, PaperFigure4RightLayoutOnSevenRanks) {
  // Figure 4 (right): TP over GPUs {0,3} and {5,6}, PP from GPU 1 to {5,6}, CP over {2,4}
  // (docs/context-parallelism.md), data parallelism across the three groups.
  sharding::Strategy st = strategy(R"({"name": "figure4-right", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": [0, 3], "layers": "0-3"}]},
    {"micro_batch_size": 1, "num_micro_batches": 2,
     "stages": [{"ranks": "1", "layers": "0-1"}, {"ranks": "5-6", "layers": "2-3"}]},
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": [2, 4], "layers": "0-3", "cp": 2}]}]})");
  expect_matches_single_process(run(st, options(kSteps)), kSteps);
}

TEST(DistTrain, TiedEmbeddingsAcrossPipelineStages) {
  // The head on each last stage reads the table from its first stage; its gradient goes back.
  sharding::Strategy st = strategy(R"({"name": "tied", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2,
     "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1-2", "layers": "2-3"}]},
    {"micro_batch_size": 2, "num_micro_batches": 1,
     "stages": [{"ranks": "3-4", "layers": "0-2"}, {"ranks": "5", "layers": "3"}]}]})");
  expect_matches_single_process(run(st, options(kSteps), {.tied = true}), kSteps, 1, true);
}

// The fused head (lm_head_loss: vocab-parallel, the logits never whole) on every rank against the
// single process with the head apart: under DP x TP x PP, and tied to the embedding across stages.
TEST(DistTrain, FusedHeadLossEqualsOneProcessWithTheHeadApart) {
  const RunOptions fused{.configure = [](int, DistOptions& o) { o.fused_head_loss = true; }};
  sharding::Strategy st = strategy(R"({"name": "dp2-tp2-pp2", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2,
     "stages": [{"ranks": "0-1", "layers": "0-1"}, {"ranks": "2-3", "layers": "2-3"}]},
    {"micro_batch_size": 1, "num_micro_batches": 2,
     "stages": [{"ranks": "4-5", "layers": "0-1"}, {"ranks": "6-7", "layers": "2-3"}]}]})");
  expect_matches_single_process(run(st, options(kSteps), fused), kSteps);
  sharding::Strategy tied = strategy(R"({"name": "tied", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2,
     "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1-2", "layers": "2-3"}]}]})");
  RunOptions fused_tied = fused;
  fused_tied.tied = true;
  expect_matches_single_process(run(tied, options(kSteps), fused_tied), kSteps, 1, true);
}

// Evaluation runs the forward passes of the current plan only: the same loss as one process, and
// the weights do not move (training afterwards still follows the one-process run).
TEST(DistTrain, EvaluationUnderAStrategyEqualsOneProcess) {
  data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  Trainer one(models::llama(config()), ds, options(2));
  while (!one.done()) one.step();
  const double expected = one.evaluate(ds, 2048);
  sharding::Strategy st = strategy(R"({"name": "uneven", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 3,
     "stages": [{"ranks": "0", "layers": "0"}, {"ranks": "1", "layers": "1-2"}, {"ranks": "2", "layers": "3"}]},
    {"micro_batch_size": 2, "num_micro_batches": 2,
     "stages": [{"ranks": "3-4", "layers": "0-2"}, {"ranks": "5", "layers": "3"}]}]})");
  std::vector<double> got(6);
  const DistRun r = run(st, options(2), {.after = [&](DistTrainer& t) { got[t.rank()] = t.evaluate(ds, 2048); }});
  for (int rank = 0; rank < 6; ++rank) EXPECT_NEAR(got[rank], expected, 1e-5 * expected) << rank;
  EXPECT_GT(expected, 0);
  expect_matches_single_process(r, 2);
}

class DistCheckpoint : public testing::TempDirTest {};

TEST_F(DistCheckpoint, SaveUnderOneStrategyResumeUnderAnother) {
  sharding::Strategy a = strategy(R"({"name": "tp2-zero", "zero1": true, "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "2-3", "layers": "0-3"}]}]})");
  sharding::Strategy b = strategy(R"({"name": "pp2", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 4,
     "stages": [{"ranks": "0", "layers": "0-2"}, {"ranks": "1-2", "layers": "3"}]}]})");
  const std::string ckpt = path("ckpt");
  // Steps 1-2 under a, 3-4 under b; both on the learning-rate schedule of a 4-step run.
  TrainerOptions first = options(2);
  first.decay_steps = 4;
  run(a, first, {.after = [&](DistTrainer& t) { t.save(ckpt); }});
  DistRun r2 = run(b, options(4), {.before = [&](DistTrainer& t) { t.restore(ckpt); }});
  expect_matches_single_process(r2, 2, 3);
}

// Per-layer recomputation under TP 2 x PP 2 (1F1B, 4 micro-batches: the first stage holds two in
// flight): B replays each layer's forward, the TP all-reduces included, so the gradients are
// bit-identical to keeping the activations, and the first stage's peak memory is lower.
TEST(DistTrain, RecomputeUnderTensorAndPipelineParallelism) {
  const std::string pipelines = R"("pipelines": [{"micro_batch_size": 1, "num_micro_batches": 4,
     "stages": [{"ranks": "0-1", "layers": "0-1"}, {"ranks": "2-3", "layers": "2-3"}]}]})";
  const DistRun kept = run(strategy(R"({"name": "tp2-pp2", )" + pipelines), options(kSteps));
  const DistRun replayed = run(strategy(R"({"name": "tp2-pp2-recompute", "recompute": true, )" + pipelines),
                               options(kSteps));
  expect_matches_single_process(replayed, kSteps);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(replayed.losses[rank], kept.losses[rank]) << rank;
    EXPECT_EQ(replayed.grad_norms[rank], kept.grad_norms[rank]) << rank;
    EXPECT_LE(replayed.peak_bytes[rank], kept.peak_bytes[rank]) << rank;
  }
  for (int rank : {0, 1}) EXPECT_LT(replayed.peak_bytes[rank], kept.peak_bytes[rank]) << rank;
  std::printf("peak bytes per rank, kept vs recomputed:");
  for (int rank = 0; rank < 4; ++rank) std::printf(" %zu/%zu", kept.peak_bytes[rank], replayed.peak_bytes[rank]);
  std::printf("\n");
}

// The constructor connects every communicator the steps use: training creates no new group (the
// uneven pipelines above, with ZeRO-1 for the post-step gathers and a TP 2 vocab-parallel loss).
TEST(DistTrain, CommunicatorsAreConnectedBeforeTheFirstStep) {
  sharding::Strategy st = strategy(R"({"name": "uneven-zero1", "zero1": true, "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 3,
     "stages": [{"ranks": "0", "layers": "0"}, {"ranks": "1", "layers": "1-2"}, {"ranks": "2", "layers": "3"}]},
    {"micro_batch_size": 2, "num_micro_batches": 2,
     "stages": [{"ranks": "3", "layers": "0-2"}, {"ranks": "4-5", "layers": "3"}]}]})");
  const sharding::AnnotationPlan plan = models::compile_llama_plan(config(), st);
  data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  std::vector<size_t> before(6), after(6);
  comm::run_thread_ranks(6, [&](int rank, comm::GroupCache& groups) {
    DistOptions o;
    o.train = options(2);
    DistTrainer t(models::llama(config()), ds, plan, o, rank, 6, groups);
    before[rank] = groups.cached();
    while (!t.done()) t.step();
    after[rank] = groups.cached();
  });
  for (int rank = 0; rank < 6; ++rank) {
    EXPECT_GT(before[rank], 1u) << rank;
    EXPECT_EQ(after[rank], before[rank]) << rank;
  }
}

TEST(DistTrain, PlanBeyondEmulatedMemoryIsRefusedBeforeTraining) {
  sharding::Strategy st = strategy(R"({"name": "one", "pipelines": [
    {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "0", "layers": "0-3"}]}]})");
  const sharding::AnnotationPlan plan = models::compile_llama_plan(config(), st);
  data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  std::string message;
  comm::run_thread_ranks(1, [&](int rank, comm::GroupCache& groups) {
    DistOptions o;
    o.train = options(1);
    o.device = {.rank = 0, .name = "tiny", .speed = 1.0, .memory_bytes = 64 << 10};
    message = testing::error_of([&] { DistTrainer t(models::llama(config()), ds, plan, o, rank, 1, groups); });
  });
  EXPECT_THAT(message, AllOf(HasSubstr("rank 0"), HasSubstr("tiny"), HasSubstr("parameters"), HasSubstr("65536")));
}

// An emulated device at speed s stretches the compute it brackets (forward, backward, optimizer) to
// CPU time / s: whatever the host's load, a step lasts at least its compute's CPU time over s.
TEST(DistTrain, EmulatedSpeedStretchesEachStepsCompute) {
  sharding::Strategy st = strategy(R"({"name": "one", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-3"}]}]})");
  const sharding::AnnotationPlan plan = models::compile_llama_plan(config(), st);
  data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  comm::run_thread_ranks(1, [&](int rank, comm::GroupCache& groups) {
    DistOptions o;
    o.train = options(2);
    o.train.threads = 1;
    o.device = {.rank = 0, .name = "half", .speed = 0.5, .memory_bytes = 0};
    DistTrainer t(models::llama(config()), ds, plan, o, rank, 1, groups);
    for (int s = 0; s < 2; ++s) {
      const double before = t.compute_time().cpu;
      const double seconds = t.step().step_seconds;
      const double compute = t.compute_time().cpu - before;
      EXPECT_GT(compute, 0) << "step " << s;
      EXPECT_GE(seconds, compute / 0.5) << "step " << s;
    }
  });
}

}  // namespace
}  // namespace hspmd::runtime
