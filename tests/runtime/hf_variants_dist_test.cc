// The Hugging Face config variants hspmd supports train under the distributed strategies exactly
// as in one process: biases (split with their column-parallel projection, or added once after the
// row-parallel all-reduce), a head_dim other than hidden / heads, Llama 3.1 or YaRN RoPE scaling,
// under tensor parallelism combined with a pipeline and with data parallelism + ZeRO-1. Every
// step's loss and gradient norm equal the single-process Trainer's (relative 1e-5, float32), and
// so do the trained weights, biases included (1e-5 for Llama 3.1 RoPE; 1e-4 for YaRN, whose
// sharper attention carries the float reassociation of the gradient sums further: measured 6e-5
// on one 64-element bias, from a single element 2e-6 apart, while the losses agree to 5e-8).
// Ranks run as threads of this process over Gloo (thread_ranks.h).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>

#include "hspmd/comm/thread_ranks.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/runtime/dist_trainer.h"
#include "runtime/dist_run_testlib.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

// 4 layers (two pipeline stages), TP 2 divides the 4 heads, 2 KV heads, hidden, vocab. Heads of 12
// over hidden 32 (head_dim), biases everywhere, RoPE scaled as Llama 3.1 does or by YaRN (which
// also scales the attention logits).
enum class Rope { kLlama3, kYarn };

models::LlamaConfig config(Rope rope) {
  models::LlamaConfig c = testing::tiny_config();
  c.num_hidden_layers = 4;
  c.explicit_head_dim = 12;
  c.attention_bias = true;
  c.mlp_bias = true;
  if (rope == Rope::kLlama3) {
    c.rope = {.type = models::RopeType::kLlama3, .theta = 10000.0, .factor = 8.0, .low_freq_factor = 1.0,
              .high_freq_factor = 4.0, .original_max_position_embeddings = 64};
  } else {
    c.rope = {.type = models::RopeType::kYarn, .theta = 10000.0, .factor = 4.0,
              .original_max_position_embeddings = 32};
  }
  return c;
}

constexpr int64_t kSteps = 3;

TrainerOptions options() {
  TrainerOptions o = testing::tiny_options(kSteps);
  o.threads = 1;
  return o;
}

struct Training {
  std::vector<std::vector<double>> losses;      // [rank][step]; one rank for the single-process run
  std::vector<std::vector<double>> grad_norms;  // likewise
  graph::TensorMap weights;
};

const Training& single_process(Rope rope) {
  static std::map<Rope, Training> cache;
  if (cache.count(rope)) return cache.at(rope);
  return cache[rope] = [&] {
    data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
    Trainer t(models::llama(config(rope)), ds, options());
    Training r;
    r.losses.resize(1);
    r.grad_norms.resize(1);
    while (!t.done()) {
      const StepMetrics m = t.step();
      r.losses[0].push_back(m.loss);
      r.grad_norms[0].push_back(m.grad_norm);
    }
    r.weights = t.parameters();
    return r;
  }();
}

Training distributed(const std::string& strategy_json, Rope rope) {
  const sharding::Strategy st = sharding::Strategy::from_json_text(strategy_json, "test");
  const int world = static_cast<int>(st.ranks().size());
  const sharding::AnnotationPlan plan = models::compile_llama_plan(config(rope), st);
  data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  Training out;
  out.losses.resize(world);
  out.grad_norms.resize(world);
  std::mutex mutex;
  comm::run_thread_ranks(world, [&](int rank, comm::GroupCache& groups) {
    DistOptions o;
    o.train = options();
    DistTrainer t(models::llama(config(rope)), ds, plan, o, rank, world, groups);
    while (!t.done()) {
      const StepMetrics m = t.step();
      out.losses[rank].push_back(m.loss);
      out.grad_norms[rank].push_back(m.grad_norm);
    }
    std::lock_guard<std::mutex> lock(mutex);
    testing::add_parameter_shards(t, out.weights);
  });
  return out;
}

using testing::relative_difference;

void expect_same(const Training& dist, const Training& ref, double weight_tolerance) {
  for (size_t rank = 0; rank < dist.losses.size(); ++rank) {
    ASSERT_EQ(dist.losses[rank].size(), static_cast<size_t>(kSteps)) << "rank " << rank;
    for (int64_t s = 0; s < kSteps; ++s) {
      EXPECT_NEAR(dist.losses[rank][s], ref.losses[0][s], 1e-5 * std::abs(ref.losses[0][s]))
          << "rank " << rank << " step " << s + 1;
      EXPECT_NEAR(dist.grad_norms[rank][s], ref.grad_norms[0][s], 1e-5 * ref.grad_norms[0][s])
          << "rank " << rank << " step " << s + 1;
    }
  }
  ASSERT_EQ(dist.weights.size(), ref.weights.size());
  int biases = 0;
  for (const auto& [name, w] : ref.weights) {
    ASSERT_TRUE(dist.weights.count(name)) << name;
    biases += name.ends_with(".bias");
    if (name.ends_with("k_proj.bias")) {
      // k's bias adds q.b to every logit of a query alike, and softmax ignores such a shift: its
      // gradient is 0 up to float rounding, which AdamW scales into updates of about lr. Both runs
      // must keep it there (no more than one lr per step, warm-up included), not agree on noise.
      for (const Tensor* t : {&w, &dist.weights.at(name)}) {
        for (int64_t i = 0; i < t->numel(); ++i) EXPECT_LE(std::abs(t->data<float>()[i]), kSteps * 1e-2) << name;
      }
      continue;
    }
    EXPECT_LT(relative_difference(dist.weights.at(name), w), weight_tolerance) << name;
  }
  EXPECT_EQ(biases, 4 * 7);
}

TEST(HfVariantsDist, BiasesHeadDimAndLlama3RopeUnderTensorAndPipelineParallelism) {
  expect_same(distributed(R"({"name": "tp2pp2", "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 2,
     "stages": [{"ranks": "0-1", "layers": "0-1"}, {"ranks": "2-3", "layers": "2-3"}]}]})",
                          Rope::kLlama3),
              single_process(Rope::kLlama3), 1e-5);
}

TEST(HfVariantsDist, BiasesAndYarnUnderDataAndTensorParallelismWithZero1) {
  expect_same(distributed(R"({"name": "dp2tp2", "zero1": true, "pipelines": [
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
    {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "2-3", "layers": "0-3"}]}]})",
                          Rope::kYarn),
              single_process(Rope::kYarn), 1e-4);
}

}  // namespace
}  // namespace hspmd::runtime
