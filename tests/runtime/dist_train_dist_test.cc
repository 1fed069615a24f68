// Distributed training against the single-process oracle (DESIGN.md §9): for each strategy, every
// step's loss and the final weights equal those of the single-process Trainer on the same data
// (relative 1e-5, float32). Ranks run as threads of this process over Gloo (rank_threads.h).
#include "hspmd/runtime/dist_trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "hspmd/data/token_dataset.h"
#include "hspmd/kernels/slice.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/comm/thread_ranks.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

using specialize::ScheduleKind;
using ::testing::AllOf;
using ::testing::HasSubstr;

// 4 layers so pipelines can have 3 stages; TP 2 divides heads (4), KV heads (2), hidden, vocab.
models::LlamaConfig config(bool tied = false) {
  models::LlamaConfig c = testing::tiny_config();
  c.num_hidden_layers = 4;
  c.tie_word_embeddings = tied;
  return c;
}

TrainerOptions options(int64_t steps) {
  TrainerOptions o = testing::tiny_options(steps);
  o.threads = 1;
  return o;
}

struct Reference {
  std::vector<double> losses, grad_norms;
  graph::TensorMap weights;
};

const Reference& reference(int64_t steps, bool tied) {
  static std::map<std::pair<int64_t, bool>, Reference> cache;
  auto it = cache.find({steps, tied});
  if (it != cache.end()) return it->second;
  data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  Trainer t(config(tied), ds, options(steps));
  Reference r;
  while (!t.done()) {
    const StepMetrics m = t.step();
    r.losses.push_back(m.loss);
    r.grad_norms.push_back(m.grad_norm);
  }
  r.weights = t.parameters();
  return cache[{steps, tied}] = std::move(r);
}

struct DistRun {
  std::vector<std::vector<double>> losses, grad_norms;  // [rank][step]
  std::vector<size_t> peak_bytes;                       // [rank] the allocator's high-water mark over all steps
  graph::TensorMap weights;                             // assembled from every rank's shards
};

sharding::Strategy strategy(const std::string& json) { return sharding::Strategy::from_json_text(json, "test"); }

// Trains with `st` on its ranks; `before` runs after construction (e.g. restore), `after` at the
// end (e.g. save).
DistRun run(const sharding::Strategy& st, const TrainerOptions& o, ScheduleKind schedule = ScheduleKind::k1F1B,
            const std::function<void(DistTrainer&)>& before = {}, const std::function<void(DistTrainer&)>& after = {},
            bool tied = false) {
  const int world = static_cast<int>(st.ranks().size());
  const sharding::AnnotationPlan plan = models::compile_llama_plan(config(tied), st);
  data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  DistRun out;
  out.losses.resize(world);
  out.grad_norms.resize(world);
  out.peak_bytes.resize(world);
  std::mutex mutex;
  comm::run_thread_ranks(world, [&](int rank, comm::GroupCache& groups) {
    DistOptions options;
    options.train = o;
    options.schedule = schedule;
    DistTrainer t(config(tied), ds, plan, options, rank, world, groups);
    if (before) before(t);
    while (!t.done()) {
      const StepMetrics m = t.step();
      out.losses[rank].push_back(m.loss);
      out.grad_norms[rank].push_back(m.grad_norm);
      out.peak_bytes[rank] = std::max(out.peak_bytes[rank], m.peak_bytes);
    }
    if (after) after(t);
    std::lock_guard<std::mutex> lock(mutex);
    for (const SavedShard& s : t.parameter_shards()) {
      auto it = out.weights.try_emplace(s.name, Tensor::zeros(s.global_shape, DType::kFloat32)).first;
      std::vector<int64_t> zero(s.region.rank(), 0);
      kernels::copy_region(s.data, zero, it->second, s.region.begin, s.region.shape().dims());
    }
  });
  return out;
}

// ||a - b|| / ||b||. Not the element-wise maximum: AdamW divides by sqrt(v), so an element whose
// gradient is ~0 turns a 1e-7 reassociation difference of the gradient sum into a visible one of
// its update, while the tensor as a whole agrees to float rounding.
double relative_difference(const Tensor& a, const Tensor& b) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data<float>()[i], y = b.data<float>()[i];
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

void expect_matches_single_process(const DistRun& run, int64_t steps, int64_t first_step = 1, bool tied = false) {
  const Reference& ref = reference(first_step - 1 + steps, tied);
  for (size_t rank = 0; rank < run.losses.size(); ++rank) {
    ASSERT_EQ(run.losses[rank].size(), static_cast<size_t>(steps)) << "rank " << rank;
    for (int64_t s = 0; s < steps; ++s) {
      const double expected = ref.losses[first_step - 1 + s];
      EXPECT_NEAR(run.losses[rank][s], expected, 1e-5 * std::abs(expected))
          << "rank " << rank << " step " << s + first_step;
      // Clipping uses the global norm: every element counted once, whatever the replication.
      const double norm = ref.grad_norms[first_step - 1 + s];
      EXPECT_NEAR(run.grad_norms[rank][s], norm, 1e-5 * norm) << "rank " << rank << " step " << s + first_step;
    }
  }
  ASSERT_EQ(run.weights.size(), ref.weights.size());
  for (const auto& [name, w] : ref.weights) {
    ASSERT_TRUE(run.weights.count(name)) << name;
    EXPECT_LT(relative_difference(run.weights.at(name), w), 1e-5) << name;
  }
}

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
  expect_matches_single_process(run(st, options(kSteps), ScheduleKind::kGPipe), kSteps);
}

TEST(DistTrain, Pipeline1F1B) {
  sharding::Strategy st = strategy(R"({"name": "pp3", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 4,
     "stages": [{"ranks": "0", "layers": "0"}, {"ranks": "1", "layers": "1-2"}, {"ranks": "2", "layers": "3"}]}]})");
  expect_matches_single_process(run(st, options(kSteps), ScheduleKind::k1F1B), kSteps);
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
  // Figure 4 (right): TP over GPUs {0,3} and {5,6}, PP from GPU 1 to {5,6}, data parallelism across
  // the three groups. (The paper's CP pair {2,4} runs TP here: context parallelism is not an op.)
  sharding::Strategy st = strategy(R"({"name": "figure4-right", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": [0, 3], "layers": "0-3"}]},
    {"micro_batch_size": 1, "num_micro_batches": 2,
     "stages": [{"ranks": "1", "layers": "0-1"}, {"ranks": "5-6", "layers": "2-3"}]},
    {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": [2, 4], "layers": "0-3"}]}]})");
  expect_matches_single_process(run(st, options(kSteps)), kSteps);
}

TEST(DistTrain, TiedEmbeddingsAcrossPipelineStages) {
  // The head on each last stage reads the table from its first stage; its gradient goes back.
  sharding::Strategy st = strategy(R"({"name": "tied", "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 2,
     "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1-2", "layers": "2-3"}]},
    {"micro_batch_size": 2, "num_micro_batches": 1,
     "stages": [{"ranks": "3-4", "layers": "0-2"}, {"ranks": "5", "layers": "3"}]}]})");
  expect_matches_single_process(run(st, options(kSteps), ScheduleKind::k1F1B, {}, {}, true), kSteps, 1, true);
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
  run(a, first, ScheduleKind::k1F1B, {}, [&](DistTrainer& t) { t.save(ckpt); });
  DistRun r2 = run(b, options(4), ScheduleKind::k1F1B, [&](DistTrainer& t) { t.restore(ckpt); });
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
    DistTrainer t(config(), ds, plan, o, rank, 6, groups);
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
    message = testing::error_of([&] { DistTrainer t(config(), ds, plan, o, rank, 1, groups); });
  });
  EXPECT_THAT(message, AllOf(HasSubstr("rank 0"), HasSubstr("tiny"), HasSubstr("parameters"), HasSubstr("65536")));
}

}  // namespace
}  // namespace hspmd::runtime
