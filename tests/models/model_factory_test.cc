// The one factory of models/model_factory.h: a config's "model_type" picks the model, an unknown
// type is refused naming the file and the type, and Llama's contract reports what its own functions
// say (parameters, layers, plans).
#include "hspmd/models/model_factory.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "error_of.h"
#include "hspmd/models/llama_config.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"

namespace hspmd::models {
namespace {

// tests/models/model_factory_test.cc -> repository root
const std::string kRoot = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();

TEST(ModelFactory, LlamaConfigBuildsLlama) {
  const std::string path = kRoot + "/configs/llama-tiny.json";
  const std::shared_ptr<const Model> m = load_model(path);
  const LlamaConfig config = LlamaConfig::from_file(path);
  EXPECT_EQ(m->model_type(), "llama");
  EXPECT_EQ(m->num_layers(), config.num_hidden_layers);
  EXPECT_EQ(m->vocab_size(), config.vocab_size);
  EXPECT_EQ(m->config_json(), nlohmann::json::parse(config.to_json_text()));
  const std::vector<ParamSpec> params = m->parameters();
  const std::vector<LlamaParam> expected = llama_parameters(config);
  ASSERT_EQ(params.size(), expected.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].name, expected[i].name);
    EXPECT_EQ(params[i].shape, expected[i].shape);
  }
  const ModelGraph g = m->build({});
  EXPECT_EQ(g.param_names.size(), params.size());
  EXPECT_EQ(g.grads.size(), params.size());
  const sharding::Strategy st = sharding::Strategy::from_json_text(
      R"({"name": "tp2", "pipelines": [{"micro_batch_size": 1, "num_micro_batches": 1,
          "stages": [{"ranks": "0-1", "layers": "0-3", "cp": 1}]}]})",
      "test");
  EXPECT_EQ(m->compile_plan(st), compile_llama_plan(config, st));
}

TEST(ModelFactory, ContextParallelDegreeIsThePipelinesTokenSplit) {
  const std::shared_ptr<const Model> m = load_model(kRoot + "/configs/llama-tiny.json");
  const sharding::AnnotationPlan plan = m->compile_plan(sharding::Strategy::from_json_text(
      R"({"name": "cp2", "pipelines": [{"micro_batch_size": 1, "num_micro_batches": 1,
          "stages": [{"ranks": "0-3", "layers": "0-3", "cp": 2}]}]})",
      "test"));
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(m->context_parallel_degree(plan, rank), 2) << rank;
  EXPECT_EQ(m->context_parallel_degree(plan, 7), 1);  // not in the plan
}

TEST(ModelFactory, UnknownModelTypeNamesFileAndType) {
  const std::string e = testing::error_of([] { model_from_config_text(R"({"model_type": "gpt2"})", "gpt2.json"); });
  EXPECT_NE(e.find("gpt2.json"), std::string::npos) << e;
  EXPECT_NE(e.find("\"gpt2\""), std::string::npos) << e;
  EXPECT_NE(e.find("\"llama\""), std::string::npos) << e;
}

// What the planner prices a model by and what the CLI prints of it come from Llama's own config:
// the width of a head and the norm weights of a layer (the derived profile's FLOPs), the parameter
// count and names (checkpoints, switch plans), the one-line summary (`hspmd checkpoint info`).
TEST(ModelFactory, LlamaSizesCountsAndSummaryFollowItsConfig) {
  LlamaConfig config = LlamaConfig::from_file(kRoot + "/configs/llama-tiny.json");
  config.explicit_head_dim = 48;  // not hidden / heads (128 / 4)
  const Llama m(config);
  const ModelSizes s = m.sizes();
  EXPECT_EQ(s.head_dim, 48);
  EXPECT_EQ(s.layer_norm_parameters, 2.0 * static_cast<double>(config.hidden_size));  // two RMSNorm weights
  EXPECT_EQ(num_parameters(m), config.num_parameters());
  const std::vector<std::pair<std::string, Shape>> shapes = parameter_shapes(m);
  const std::vector<LlamaParam> expected = llama_parameters(config);
  ASSERT_EQ(shapes.size(), expected.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_EQ(shapes[i].first, expected[i].name);
    EXPECT_EQ(shapes[i].second, expected[i].shape);
  }
  EXPECT_EQ(m.summary(), "4 layers, hidden 128, 4 heads (2 key/value), intermediate 352, vocab 260, " +
                             std::to_string(config.num_parameters()) + " parameters");
  config.tie_word_embeddings = true;
  EXPECT_TRUE(Llama(config).summary().ends_with(" parameters, tied embeddings")) << Llama(config).summary();
}

}  // namespace
}  // namespace hspmd::models
