// The model contract (models/model.h) with a second, deliberately different model
// (runtime/mlp_lm_testlib.h): it trains under a heterogeneous strategy (TP 2 next to a 2-stage
// pipeline, ZeRO-1), switches to TP 2 x PP 2 mid-run and saves a checkpoint, with every step's loss,
// gradient norm and the final weights those of one process, and the checkpoint read back by the
// single-process trainer; nothing in the runtime was written for this model. Its weights load from
// Hugging Face safetensors by its own names, with no tensor recomputed (unlike Llama's rotary buffers).
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "hspmd/comm/thread_ranks.h"
#include "hspmd/core/safetensors.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/runtime/checkpoint.h"
#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/runtime/hf_weights.h"
#include "hspmd/runtime/trainer.h"
#include "runtime/dist_run_testlib.h"
#include "runtime/mlp_lm_testlib.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

using testing::add_parameter_shards;
using testing::dist_options;
using testing::mlp_lm;
using testing::MlpLmConfig;
using testing::relative_difference;
using testing::strategy;

constexpr int64_t kSteps = 4;

// TP 2 next to a 2-stage pipeline, with their own micro-batch sizes and counts, ZeRO-1.
const char* kHetero = R"({"name": "hetero", "zero1": true, "pipelines": [
  {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
  {"micro_batch_size": 1, "num_micro_batches": 2,
   "stages": [{"ranks": "2", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}]})";
const char* kTp2Pp2 = R"({"name": "tp2-pp2", "pipelines": [
  {"micro_batch_size": 1, "num_micro_batches": 4,
   "stages": [{"ranks": "0-1", "layers": "0-1"}, {"ranks": "2-3", "layers": "2-3"}]}]})";

class ModelContract : public testing::TempDirTest {};

TEST_F(ModelContract, SecondModelTrainsHeterogeneousAndSwitchedAsOneProcess) {
  const std::shared_ptr<const models::Model> model = mlp_lm();
  data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  const TrainerOptions o = dist_options(kSteps);

  Trainer single(model, ds, o);
  std::vector<StepMetrics> expected;
  while (!single.done()) expected.push_back(single.step());
  const graph::TensorMap expected_weights = single.parameters();

  const sharding::AnnotationPlan hetero = model->compile_plan(strategy(kHetero));
  const sharding::AnnotationPlan tp2_pp2 = model->compile_plan(strategy(kTp2Pp2));
  const std::string ckpt = path("ckpt");
  std::vector<std::vector<StepMetrics>> got(4);
  std::vector<int64_t> switched_bytes(4);
  graph::TensorMap weights;
  std::mutex mutex;
  comm::run_thread_ranks(4, [&](int rank, comm::GroupCache& groups) {
    DistOptions options;
    options.train = o;
    options.plan_name = "hetero";
    DistTrainer t(model, ds, hetero, options, rank, 4, groups);
    while (!t.done()) {
      if (t.step_count() == 2) switched_bytes[rank] = t.switch_to(tp2_pp2, "tp2-pp2").sent_bytes;
      got[rank].push_back(t.step());
    }
    t.save(ckpt);
    std::lock_guard<std::mutex> lock(mutex);
    add_parameter_shards(t, weights);
  });

  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_GT(switched_bytes[rank], 0) << "rank " << rank << ": the switch moved nothing";
  }
  ASSERT_EQ(expected.size(), static_cast<size_t>(kSteps));
  testing::expect_steps_match(got, expected);
  EXPECT_GT(expected.front().loss, expected.back().loss) << "the model does not learn";
  ASSERT_EQ(weights.size(), expected_weights.size());
  for (const auto& [name, w] : expected_weights) {
    ASSERT_TRUE(weights.contains(name)) << name;
    EXPECT_LT(relative_difference(weights.at(name), w), 1e-5) << name;
  }

  // The checkpoint, written by four ranks under TP 2 x PP 2, continues in one process: the weights
  // and step are the distributed run's.
  TrainerOptions more = o;
  more.steps = kSteps + 1;
  Trainer resumed(model, ds, more);
  resumed.restore(ckpt);
  EXPECT_EQ(resumed.step_count(), kSteps);
  const graph::TensorMap restored = resumed.parameters();
  for (const auto& [name, w] : weights) {
    EXPECT_EQ(restored.at(name).to_vector<float>(), w.to_vector<float>()) << name;
  }
  EXPECT_TRUE(std::isfinite(resumed.step().loss));
}

TEST_F(ModelContract, SecondModelLoadsHuggingFaceWeightsByItsOwnNames) {
  const std::shared_ptr<const models::Model> model = mlp_lm();
  data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  Trainer trained(model, ds, dist_options(1));
  trained.step();
  const graph::TensorMap weights = trained.parameters();
  std::vector<std::pair<std::string, Tensor>> tensors(weights.begin(), weights.end());
  safetensors::save(path("model.safetensors"), tensors, {{"format", "pt"}});

  const HfWeightsAudit audit = audit_hf_weights(path("model.safetensors"), *model, /*check_dtype=*/true);
  EXPECT_TRUE(audit.ok()) << audit.problems();
  EXPECT_EQ(audit.found.size(), model->parameters().size());
  const graph::TensorMap loaded = load_hf_weights(path("model.safetensors"), *model);
  ASSERT_EQ(loaded.size(), weights.size());
  for (const auto& [name, w] : weights) {
    EXPECT_EQ(loaded.at(name).to_vector<float>(), w.to_vector<float>()) << name;
  }

  // A buffer Llama recomputes is, for this model, a tensor of another model.
  tensors.emplace_back("rotary_emb.inv_freq", Tensor::full(Shape{4}, DType::kFloat32, 1.0));
  safetensors::save(path("with_buffer.safetensors"), tensors, {{"format", "pt"}});
  EXPECT_EQ(audit_hf_weights(path("with_buffer.safetensors"), *model, true).extra,
            std::vector<std::string>{"rotary_emb.inv_freq"});
  const std::string e = testing::error_of([&] { load_hf_weights(path("with_buffer.safetensors"), *model); });
  EXPECT_NE(e.find("unexpected tensor 'rotary_emb.inv_freq'"), std::string::npos) << e;
}

// The sizes the planner prices it by add up to its parameters at any depth, as the profiler's
// 1- and 3-layer variants need.
TEST(ModelContractSizes, SecondModelSizesAddUpToItsParametersAtEveryDepth) {
  for (int layers : {1, 3, 4}) {
    const std::shared_ptr<const models::Model> model = mlp_lm()->with_num_layers(layers);
    EXPECT_EQ(model->num_layers(), layers);
    const models::ModelSizes s = model->sizes();
    EXPECT_EQ(s.layers, layers);
    EXPECT_EQ(s.heads, 0) << "no attention";
    double total = 0;
    for (const models::ParamSpec& p : model->parameters()) total += static_cast<double>(p.shape.numel());
    EXPECT_EQ(total, s.embedding_parameters + layers * s.layer_parameters + s.head_parameters) << layers << " layers";
    EXPECT_GT(s.layer_parameters, 0);
    EXPECT_GT(s.embedding_parameters, 0);
    EXPECT_GT(s.head_parameters, 0);
  }
  EXPECT_EQ(mlp_lm()->with_num_layers(3)->config_json(), mlp_lm(MlpLmConfig{.num_blocks = 3})->config_json());
}

// A model's one-line summary (`hspmd checkpoint info`) by default: its sizes and parameter count,
// without attention heads it has not got.
TEST(ModelContractSummary, SecondModelIsSummarizedByItsSizes) {
  const std::shared_ptr<const models::Model> model = mlp_lm();
  EXPECT_EQ(model->summary(), "4 layers, hidden 32, intermediate 64, vocab 260, " +
                                  std::to_string(models::num_parameters(*model)) + " parameters");
}

TEST(ModelContractPlan, RefusesContextParallelismForTheModelWithoutSequences) {
  const std::string e = testing::error_of([&] {
    mlp_lm()->compile_plan(strategy(R"({"name": "cp2", "pipelines": [
      {"micro_batch_size": 1, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3", "cp": 2}]}]})"));
  });
  EXPECT_NE(e.find("no context parallelism"), std::string::npos) << e;
}

}  // namespace
}  // namespace hspmd::runtime
