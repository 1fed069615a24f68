// Hugging Face fidelity: hspmd computes what transformers computes on the golden fixtures of
// scripts/make-hf-fixtures.py (tests/runtime/hf_fixtures/: save_pretrained directories of tiny
// Llamas, one per supported config variant, and transformers' per-token losses, logits and RoPE
// inverse frequencies). Refused variants must fail on their config before anything is computed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "hspmd/core/safetensors.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/graph/executor.h"
#include "hspmd/models/llama.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/runtime/checkpoint.h"
#include "hspmd/runtime/evaluate.h"
#include "hspmd/runtime/hf_weights.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

fs::path fixtures() { return testing::source_dir() / "tests/runtime/hf_fixtures"; }

const std::vector<std::string> kSupported = {"untied", "tied",        "mha_eps",        "head_dim", "theta",
                                             "llama3", "linear",      "yarn",           "yarn_mscale", "bf16",
                                             "attention_bias", "mlp_bias", "legacy_llama3"};

nlohmann::json expected_of(const std::string& variant) {
  std::ifstream f(fixtures() / "supported" / variant / "expected.json");
  return nlohmann::json::parse(f);
}

std::vector<std::vector<int64_t>> documents_of(const nlohmann::json& expected) {
  return expected.at("documents").get<std::vector<std::vector<int64_t>>>();
}

struct Forward {
  std::vector<std::vector<double>> token_losses;  // [document][token], the causal-LM shift
  std::vector<double> logits;                      // [T, V] of the packed batch
  double mean_loss = 0.0;
};

// Every document packed into one batch (each restarts its positions), then per-token cross-entropy
// from the logits in double.
Forward forward(const models::LlamaConfig& config, const graph::TensorMap& weights,
                const std::vector<std::vector<int64_t>>& docs) {
  std::vector<int64_t> ids, positions, cu{0}, targets;
  for (const auto& doc : docs) {
    for (size_t i = 0; i < doc.size(); ++i) {
      ids.push_back(doc[i]);
      positions.push_back(static_cast<int64_t>(i));
      targets.push_back(i + 1 < doc.size() ? doc[i + 1] : -100);
    }
    cu.push_back(static_cast<int64_t>(ids.size()));
  }
  const int64_t T = static_cast<int64_t>(ids.size()), V = config.vocab_size;
  const int64_t labelled = T - static_cast<int64_t>(docs.size());
  std::vector<int64_t> token_index(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) token_index[i] = i;  // packed order (no context parallelism)
  // The head apart, so that the logits are a tensor to compare (the fused head's loss equals it:
  // tests/models/llama_test.cc).
  models::LlamaModel m = models::build_llama(config, {.with_backward = false, .fused_head_loss = false});
  const graph::TensorRef logits_ref = *m.graph.find("lm_head_out");
  graph::Executor ex(m.graph, {m.loss, logits_ref});
  graph::TensorMap feeds{{"input_ids", Tensor::from_vector(Shape{T}, ids)},
                         {"positions", Tensor::from_vector(Shape{T}, positions)},
                         {"cu_seqlens", Tensor::from_vector(Shape{static_cast<int64_t>(cu.size())}, cu)},
                         {"targets", Tensor::from_vector(Shape{T}, targets)},
                         {"loss_scale", Tensor::full(Shape{}, DType::kFloat32, 1.0 / static_cast<double>(labelled))},
                         {"token_index", Tensor::from_vector(Shape{T}, token_index)}};
  std::vector<Tensor> out = ex.run(feeds, weights);
  Forward f;
  f.mean_loss = out[0].element_as_double(0);
  for (int64_t i = 0; i < T * V; ++i) f.logits.push_back(out[1].element_as_double(i));
  for (size_t d = 0; d < docs.size(); ++d) {
    std::vector<double> losses;
    for (int64_t t = cu[d]; t + 1 < cu[d + 1]; ++t) {
      const double* row = f.logits.data() + t * V;
      double max = row[0], sum = 0.0;
      for (int64_t v = 0; v < V; ++v) max = std::max(max, row[v]);
      for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - max);
      losses.push_back(std::log(sum) + max - row[targets[t]]);
    }
    f.token_losses.push_back(losses);
  }
  return f;
}

double relative(double a, double b) { return std::abs(a - b) / std::abs(b); }

class HfFidelity : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFidelity, LossesLogitsAndRopeEqualTransformers) {
  const std::string dir = (fixtures() / "supported" / GetParam()).string();
  const nlohmann::json expected = expected_of(GetParam());
  const models::LlamaConfig config = models::LlamaConfig::from_file(dir);
  const HfWeightsAudit audit = audit_hf_weights(dir, models::Llama(config), /*check_dtype=*/true);
  EXPECT_TRUE(audit.ok()) << audit.problems();

  // RoPE: the same float32 inverse frequencies as transformers' rotary_emb buffer.
  const std::vector<double> inv_freq = config.rope.inverse_frequencies(config.head_dim());
  const auto hf_inv_freq = expected.at("rope_inv_freq").get<std::vector<double>>();
  ASSERT_EQ(inv_freq.size(), hf_inv_freq.size());
  for (size_t i = 0; i < inv_freq.size(); ++i) EXPECT_EQ(inv_freq[i], hf_inv_freq[i]) << "pair " << i;

  const Forward f = forward(config, load_hf_weights(dir, models::Llama(config)), documents_of(expected));
  const auto hf_losses = expected.at("token_losses").get<std::vector<std::vector<double>>>();
  ASSERT_EQ(f.token_losses.size(), hf_losses.size());
  double worst_token = 0.0;
  for (size_t d = 0; d < hf_losses.size(); ++d) {
    ASSERT_EQ(f.token_losses[d].size(), hf_losses[d].size());
    for (size_t t = 0; t < hf_losses[d].size(); ++t) {
      worst_token = std::max(worst_token, relative(f.token_losses[d][t], hf_losses[d][t]));
    }
  }
  EXPECT_LT(worst_token, 1e-5);
  const double mean_diff = relative(f.mean_loss, expected.at("mean_loss").get<double>());
  EXPECT_LT(mean_diff, 1e-5);
  const auto hf_logits = expected.at("logits_doc0_first4_tokens_first8_vocab").get<std::vector<std::vector<double>>>();
  double worst_logit = 0.0;
  for (size_t t = 0; t < hf_logits.size(); ++t) {
    for (size_t v = 0; v < hf_logits[t].size(); ++v) {
      worst_logit = std::max(worst_logit, std::abs(f.logits[t * config.vocab_size + v] - hf_logits[t][v]));
    }
  }
  EXPECT_LT(worst_logit, 1e-4);
  std::printf("%-14s mean loss relative difference %.2e, worst token %.2e, worst logit (absolute) %.2e\n",
              GetParam().c_str(), mean_diff, worst_token, worst_logit);
}

INSTANTIATE_TEST_SUITE_P(Variants, HfFidelity, ::testing::ValuesIn(kSupported));

// The fixtures can tell a right model from a wrong one: computing each variant without the key
// that makes it special moves the loss far beyond the 1e-5 the fidelity test allows.
TEST(HfFidelityControls, IgnoringAKeyMovesTheLoss) {
  auto mean_loss_with = [](const std::string& variant, auto edit) {
    const std::string dir = (fixtures() / "supported" / variant).string();
    models::LlamaConfig config = models::LlamaConfig::from_file(dir);
    graph::TensorMap weights = load_hf_weights(dir, models::Llama(config));
    if constexpr (std::is_invocable_v<decltype(edit), models::LlamaConfig&>) {
      edit(config);
    } else {
      edit(weights);
    }
    const double diff = relative(forward(config, weights, documents_of(expected_of(variant))).mean_loss,
                                 expected_of(variant).at("mean_loss").get<double>());
    std::printf("%-14s without its key: mean loss relative difference %.1e\n", variant.c_str(), diff);
    return diff;
  };
  EXPECT_GT(mean_loss_with("llama3", [](models::LlamaConfig& c) { c.rope.type = models::RopeType::kDefault; }), 1e-3);
  EXPECT_GT(mean_loss_with("legacy_llama3", [](models::LlamaConfig& c) { c.rope = {}; }), 1e-3);
  EXPECT_GT(mean_loss_with("linear", [](models::LlamaConfig& c) { c.rope.type = models::RopeType::kDefault; }), 1e-3);
  EXPECT_GT(mean_loss_with("theta", [](models::LlamaConfig& c) { c.rope.theta = 10000.0; }), 1e-4);
  // YaRN without its cos/sin scale, and without its frequencies.
  EXPECT_GT(mean_loss_with("yarn", [](models::LlamaConfig& c) { c.rope.attention_factor = 1.0; }), 1e-3);
  EXPECT_GT(mean_loss_with("yarn_mscale", [](models::LlamaConfig& c) { c.rope.type = models::RopeType::kDefault; }),
            1e-3);
  EXPECT_GT(mean_loss_with("mha_eps", [](models::LlamaConfig& c) { c.rms_norm_eps = 1e-6; }), 1e-3);
  auto zero_biases = [](graph::TensorMap& w) {
    for (auto& [name, t] : w) {
      if (name.ends_with(".bias")) t = Tensor::zeros(t.shape(), t.dtype());
    }
  };
  EXPECT_GT(mean_loss_with("attention_bias", zero_biases), 1e-3);
  EXPECT_GT(mean_loss_with("mlp_bias", zero_biases), 1e-3);
}

class HfFidelityCli : public testing::TempDirTest {};

// A sharded save_pretrained directory (model.safetensors.index.json and its shards) loads as the
// single file does; a shard the index names but the directory lacks is an error naming both.
TEST_F(HfFidelityCli, ShardedSavePretrainedDirectoryLoads) {
  const fs::path src = fixtures() / "supported" / "untied";
  const fs::path dir = path("sharded");
  fs::create_directories(dir);
  fs::copy_file(src / "config.json", dir / "config.json");
  std::vector<std::pair<std::string, Tensor>> first, second;
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  for (const auto& [name, t] : safetensors::load_all((src / "model.safetensors").string())) {
    const bool late = name.starts_with("model.layers.1.") || name.starts_with("lm_head");
    (late ? second : first).emplace_back(name, t);
    index["weight_map"][name] = late ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
  }
  safetensors::save((dir / "model-00001-of-00002.safetensors").string(), first);
  safetensors::save((dir / "model-00002-of-00002.safetensors").string(), second);
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();

  EXPECT_EQ(hf_weight_files(dir.string()).size(), 2u);
  const models::LlamaConfig config = models::LlamaConfig::from_file(dir.string());
  const nlohmann::json expected = expected_of("untied");
  const Forward f = forward(config, load_hf_weights(dir.string(), models::Llama(config)), documents_of(expected));
  EXPECT_LT(relative(f.mean_loss, expected.at("mean_loss").get<double>()), 1e-5);

  fs::remove(dir / "model-00002-of-00002.safetensors");
  EXPECT_THAT(testing::error_of([&] { load_hf_weights(dir.string(), models::Llama(config)); }),
              AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("model-00002-of-00002.safetensors"),
                    HasSubstr("does not exist")));
}

// `hspmd eval` on each save_pretrained directory (config and weights from the one path) prints
// transformers' mean loss to 1e-5.
TEST_F(HfFidelityCli, EvalOnSavePretrainedDirectoriesEqualsTransformers) {
  for (const std::string& variant : kSupported) {
    SCOPED_TRACE(variant);
    const nlohmann::json expected = expected_of(variant);
    const std::string data = path("data-" + variant);
    {
      data::TokenDatasetWriter w(data, {.vocab_size = 96, .tokenizer_id = "fixture"});
      for (const auto& doc : documents_of(expected)) {
        std::vector<int32_t> ids(doc.begin(), doc.end());
        w.add_document(ids);
      }
      w.finish();
    }
    const std::string dir = (fixtures() / "supported" / variant).string();
    testing::CommandResult r = testing::run_hspmd("eval --model " + dir + " --data " + data + " --seq-len 64");
    ASSERT_EQ(r.code, 0) << r.output;
    const size_t at = r.output.find("mean loss ");
    ASSERT_NE(at, std::string::npos) << r.output;
    const double loss = std::strtod(r.output.c_str() + at + 10, nullptr);
    const double hf_loss = expected.at("mean_loss").get<double>();
    EXPECT_LT(relative(loss, hf_loss), 1e-5) << r.output;
    std::printf("hspmd eval %-14s mean loss %.6f, transformers %.6f: relative difference %.1e\n", variant.c_str(), loss,
                hf_loss, relative(loss, hf_loss));
  }
}

// Refused before any computation: the error is about the config even though the dataset does not
// exist and (for these directories) there are no weights.
TEST_F(HfFidelityCli, UnsupportedVariantsAreRefusedNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"gelu", "\"hidden_act\" is \"gelu\""},
      {"float16", "\"dtype\" is \"float16\""},
      {"gemma2", "\"model_type\" is \"gemma2\""},
      {"longrope", "\"rope_parameters.rope_type\" is \"longrope\""},
      {"dynamic", "\"rope_parameters.rope_type\" is \"dynamic\""}};
  for (const auto& [variant, message] : cases) {
    const std::string dir = (fixtures() / "refused" / variant).string();
    testing::CommandResult r = testing::run_hspmd("eval --model " + dir + " --data " + path("none"));
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_THAT(r.output, AllOf(HasSubstr(dir + "/config.json"), HasSubstr(message))) << variant;
    r = testing::run_hspmd("model info " + dir);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_THAT(r.output, HasSubstr(message)) << variant;
  }
}

TEST_F(HfFidelityCli, ModelInfoPrintsShapesRopeAndChecksWeights) {
  const std::string dir = (fixtures() / "supported" / "llama3").string();
  testing::CommandResult r = testing::run_hspmd("model info " + dir + " --weights " + dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("head dim 8 (head_dim, not hidden / heads)"));
  EXPECT_THAT(r.output, HasSubstr("rope: llama3 (theta 10000, factor 8, low_freq_factor 1, high_freq_factor 4, "
                                  "original_max_position_embeddings 64)"));
  EXPECT_THAT(r.output, HasSubstr("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_THAT(r.output, HasSubstr("[32, 16]"));  // q_proj: 4 heads x 8
  const models::LlamaConfig config = models::LlamaConfig::from_file(dir);
  EXPECT_THAT(r.output, HasSubstr("parameters: " + std::to_string(config.num_parameters())));
  EXPECT_THAT(r.output, HasSubstr("all 21 tensors present"));

  // Weights of another variant: every missing, extra and mis-shaped tensor by name, exit status 1.
  const std::string other = (fixtures() / "supported" / "tied").string();
  r = testing::run_hspmd("model info " + dir + " --weights " + other);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("tensor 'lm_head.weight' is missing"),
                              HasSubstr("tensor 'model.layers.1.self_attn.o_proj.weight' has shape [16, 16], the "
                                        "config implies [16, 32]")));
  // A config of one layer against two layers' weights: the second layer's tensors are extra.
  nlohmann::json one_layer = nlohmann::json::parse(std::ifstream(fs::path(dir) / "config.json"));
  one_layer["num_hidden_layers"] = 1;
  std::ofstream(path("config.json")) << one_layer.dump();
  r = testing::run_hspmd("model info " + path("config.json") + " --weights " + dir);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("unexpected tensor 'model.layers.1.mlp.down_proj.weight'")) << r.output;
  // The bf16 variant's file is bfloat16 as its config says; against a float32 config it is not.
  r = testing::run_hspmd("model info " + (fixtures() / "supported" / "untied").string() + " --weights " +
                         (fixtures() / "supported" / "bf16").string());
  EXPECT_THAT(r.output, HasSubstr("is bfloat16, the config's dtype is float32")) << r.output;
}

}  // namespace
}  // namespace hspmd::runtime
