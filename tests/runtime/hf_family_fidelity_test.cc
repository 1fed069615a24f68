// Hugging Face fidelity of the decoder families built as variants of Llama (Qwen2, Qwen3, Mistral,
// Gemma 3): on the golden fixtures of scripts/make-hf-family-fixtures.py
// (tests/runtime/hf_family_fixtures/: save_pretrained directories of tiny models, transformers'
// per-token losses and the gradient of their mean with respect to every parameter), hspmd's model,
// loaded through the model contract by its config's model_type, computes every token loss to 1e-5
// relative and every parameter's gradient to 1e-4 (relative in norm), with the documents packed
// into one batch and sliding windows shorter than the documents. `hspmd eval` of each directory
// prints transformers' mean loss.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hspmd/core/safetensors.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/graph/executor.h"
#include "hspmd/runtime/checkpoint.h"
#include "hspmd/models/llama_config.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/model_factory.h"
#include "hspmd/runtime/hf_weights.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

namespace fs = std::filesystem;

fs::path fixtures() { return testing::source_dir() / "tests/runtime/hf_family_fixtures"; }

const std::vector<std::string> kVariants = {"qwen3",  "qwen3_bias_sliding", "qwen2",         "qwen2_sliding",
                                            "mistral", "gemma3",            "gemma3_softcap", "gemma3_legacy"};

nlohmann::json expected_of(const std::string& variant) {
  std::ifstream f(fixtures() / variant / "expected.json");
  return nlohmann::json::parse(f);
}

std::vector<std::vector<int64_t>> documents_of(const nlohmann::json& expected) {
  return expected.at("documents").get<std::vector<std::vector<int64_t>>>();
}

// Every document packed into one batch: positions restart and attention stops at each boundary.
data::Batch packed(const std::vector<std::vector<int64_t>>& docs) {
  data::Batch b;
  b.cu_seqlens.push_back(0);
  for (const auto& doc : docs) {
    for (size_t i = 0; i < doc.size(); ++i) {
      b.tokens.push_back(static_cast<int32_t>(doc[i]));
      b.positions.push_back(static_cast<int32_t>(i));
      b.targets.push_back(i + 1 < doc.size() ? static_cast<int32_t>(doc[i + 1]) : data::kIgnoreTarget);
    }
    b.cu_seqlens.push_back(static_cast<int64_t>(b.tokens.size()));
  }
  b.row_offsets = {0, b.num_tokens()};
  return b;
}

struct Result {
  std::vector<std::vector<double>> token_losses;  // [document][token], the causal-LM shift
  double mean_loss = 0.0;
  graph::TensorMap grads;  // by parameter name
};

// One training step's forward and backward of the model in `dir` on its weights, the head apart
// from the loss so that the logits are a tensor: per-token losses from them in double.
Result run(const std::string& dir, const std::vector<std::vector<int64_t>>& docs) {
  const std::shared_ptr<const models::Model> model = models::load_model(dir);
  const double softcap = models::LlamaConfig::from_file(dir).decoder.final_logit_softcap;
  models::ModelGraph g = model->build({.fused_head_loss = false});
  const graph::TensorRef logits = *g.graph.find("lm_head_out");
  std::vector<graph::TensorRef> fetches{g.loss, logits};
  fetches.insert(fetches.end(), g.grads.begin(), g.grads.end());
  graph::Executor ex(g.graph, fetches);
  const data::Batch batch = packed(docs);
  const std::vector<Tensor> out = ex.run(
      model->feeds(batch, batch.num_label_tokens(), models::packed_order(batch.num_tokens())),
      load_hf_weights(dir, *model));

  Result r;
  r.mean_loss = out[0].element_as_double(0);
  const int64_t V = model->vocab_size();
  for (size_t d = 0; d + 1 < batch.cu_seqlens.size(); ++d) {
    std::vector<double> losses;
    for (int64_t t = batch.cu_seqlens[d]; t + 1 < batch.cu_seqlens[d + 1]; ++t) {
      std::vector<double> row(static_cast<size_t>(V));
      for (int64_t v = 0; v < V; ++v) {
        const double z = out[1].element_as_double(t * V + v);
        row[v] = softcap > 0 ? softcap * std::tanh(z / softcap) : z;  // the loss reads capped logits
      }
      const double max = *std::max_element(row.begin(), row.end());
      double sum = 0.0;
      for (double z : row) sum += std::exp(z - max);
      losses.push_back(std::log(sum) + max - row[batch.targets[t]]);
    }
    r.token_losses.push_back(losses);
  }
  for (size_t i = 0; i < g.param_names.size(); ++i) r.grads[g.param_names[i]] = out[2 + i];
  return r;
}

double relative(double a, double b) { return std::abs(a - b) / std::abs(b); }

// ||a - b|| / ||b|| in double.
double relative_norm(const Tensor& a, const Tensor& b) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = a.element_as_double(i), y = b.element_as_double(i);
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

class HfFamilyFidelity : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFamilyFidelity, TokenLossesAndGradientsEqualTransformers) {
  const std::string dir = (fixtures() / GetParam()).string();
  const nlohmann::json expected = expected_of(GetParam());
  const std::shared_ptr<const models::Model> model = models::load_model(dir);
  const HfWeightsAudit audit = audit_hf_weights(dir, *model, /*check_dtype=*/true);
  ASSERT_TRUE(audit.ok()) << audit.problems();

  const Result r = run(dir, documents_of(expected));
  const auto hf_losses = expected.at("token_losses").get<std::vector<std::vector<double>>>();
  ASSERT_EQ(r.token_losses.size(), hf_losses.size());
  double worst_token = 0.0;
  for (size_t d = 0; d < hf_losses.size(); ++d) {
    ASSERT_EQ(r.token_losses[d].size(), hf_losses[d].size());
    for (size_t t = 0; t < hf_losses[d].size(); ++t) {
      worst_token = std::max(worst_token, relative(r.token_losses[d][t], hf_losses[d][t]));
    }
  }
  EXPECT_LT(worst_token, 1e-5);
  const double mean_diff = relative(r.mean_loss, expected.at("mean_loss").get<double>());
  EXPECT_LT(mean_diff, 1e-5);

  const auto hf_grads = safetensors::load_all((fs::path(dir) / "grads.safetensors").string());
  ASSERT_EQ(hf_grads.size(), r.grads.size());
  double worst_grad = 0.0;
  std::string worst_name;
  for (const auto& [name, hf] : hf_grads) {
    ASSERT_TRUE(r.grads.count(name)) << name;
    const double diff = relative_norm(r.grads.at(name), hf);
    EXPECT_LT(diff, 1e-4) << name;
    if (diff > worst_grad) worst_grad = diff, worst_name = name;
  }
  std::printf("%-20s mean loss relative difference %.2e, worst token %.2e, worst gradient %.2e (%s)\n",
              GetParam().c_str(), mean_diff, worst_token, worst_grad, worst_name.c_str());
}

INSTANTIATE_TEST_SUITE_P(Families, HfFamilyFidelity, ::testing::ValuesIn(kVariants));

// The mean loss of `variant`'s weights under its config changed by `edit` (weights the edited model
// has no place for are dropped), relative to transformers'.
double loss_moved_by(const std::string& variant, const std::function<void(models::LlamaConfig&)>& edit) {
  const std::string dir = (fixtures() / variant).string();
  models::LlamaConfig c = models::LlamaConfig::from_file(dir);
  edit(c);
  const std::shared_ptr<const models::Model> model = models::llama(c);
  graph::TensorMap weights = load_hf_weights(dir, *models::load_model(dir));
  std::set<std::string> names;
  for (const models::ParamSpec& p : model->parameters()) names.insert(p.name);
  std::erase_if(weights, [&](const auto& w) { return !names.count(w.first); });
  models::ModelGraph g = model->build({.with_backward = false});
  graph::Executor ex(g.graph, {g.loss});
  const data::Batch batch = packed(documents_of(expected_of(variant)));
  const std::vector<int64_t> order = models::packed_order(batch.num_tokens());
  const double loss = ex.run(model->feeds(batch, batch.num_label_tokens(), order), weights)[0].element_as_double(0);
  const double diff = relative(loss, expected_of(variant).at("mean_loss").get<double>());
  std::printf("%-20s without its feature: mean loss relative difference %.1e\n", variant.c_str(), diff);
  return diff;
}

// The fixtures tell a right model from a wrong one: each family without one of its features is far
// from transformers' loss.
TEST(HfFamilyFidelityControls, DroppingAFamilyFeatureMovesTheLoss) {
  using models::LlamaConfig;
  EXPECT_GT(loss_moved_by("qwen3", [](LlamaConfig& c) { c.decoder.qk_norm = false; }), 1e-3);
  EXPECT_GT(loss_moved_by("qwen2", [](LlamaConfig& c) { c.attention_bias = false; }), 1e-3);
  EXPECT_GT(loss_moved_by("mistral", [](LlamaConfig& c) { c.decoder.sliding_layers.assign(2, false); }), 1e-3);
  EXPECT_GT(loss_moved_by("qwen3_bias_sliding", [](LlamaConfig& c) { c.decoder.sliding_layers.clear(); }), 1e-3);
  EXPECT_GT(loss_moved_by("qwen2_sliding", [](LlamaConfig& c) { c.decoder.sliding_layers.clear(); }), 1e-3);
  EXPECT_GT(loss_moved_by("gemma3", [](LlamaConfig& c) { c.decoder.scale_embeddings = false; }), 1e-3);
  EXPECT_GT(loss_moved_by("gemma3", [](LlamaConfig& c) { c.decoder.sliding_rope.reset(); }), 1e-4);
  EXPECT_GT(loss_moved_by("gemma3", [](LlamaConfig& c) { c.decoder.query_pre_attn_scalar = 0; }), 1e-3);
  EXPECT_GT(loss_moved_by("gemma3", [](LlamaConfig& c) { c.decoder.activation = models::MlpActivation::kSilu; }),
            1e-3);
  EXPECT_GT(loss_moved_by("gemma3", [](LlamaConfig& c) { c.decoder.norm_weight_offset = 0; }), 1e-3);
  EXPECT_GT(loss_moved_by("gemma3_softcap", [](LlamaConfig& c) { c.decoder.final_logit_softcap = 0; }), 1e-3);
}

class HfFamilyCli : public testing::TempDirTest {};

// `hspmd eval` on each save_pretrained directory (config and weights from the one path) prints
// transformers' mean loss to 1e-5.
TEST_F(HfFamilyCli, EvalOnSavePretrainedDirectoriesEqualsTransformers) {
  for (const std::string& variant : kVariants) {
    SCOPED_TRACE(variant);
    const nlohmann::json expected = expected_of(variant);
    const std::string data = path("data-" + variant);
    {
      data::TokenDatasetWriter w(data, {.vocab_size = 96, .tokenizer_id = "fixture"});
      for (const auto& doc : documents_of(expected)) w.add_document(std::vector<int32_t>(doc.begin(), doc.end()));
      w.finish();
    }
    const std::string dir = (fixtures() / variant).string();
    testing::CommandResult r = testing::run_hspmd("eval --model " + dir + " --data " + data + " --seq-len 64");
    ASSERT_EQ(r.code, 0) << r.output;
    const size_t at = r.output.find("mean loss ");
    ASSERT_NE(at, std::string::npos) << r.output;
    const double loss = std::strtod(r.output.c_str() + at + 10, nullptr);
    EXPECT_LT(relative(loss, expected.at("mean_loss").get<double>()), 1e-5) << r.output;
  }
}

// `hspmd model info` says what sets each family apart, and checks its weights by their names.
TEST_F(HfFamilyCli, ModelInfoDescribesTheFamily) {
  const std::string qwen3 = (fixtures() / "qwen3").string();
  testing::CommandResult r = testing::run_hspmd("model info " + qwen3 + " --weights " + qwen3);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, ::testing::AllOf(::testing::HasSubstr("architecture: Qwen3, 2 layers"),
                                         ::testing::HasSubstr("q/k norm: RMSNorm over each head's 8 values"),
                                         ::testing::HasSubstr("model.layers.0.self_attn.k_norm.weight"),
                                         ::testing::HasSubstr("all 25 tensors present")));
  const std::string qwen2 = (fixtures() / "qwen2").string();
  r = testing::run_hspmd("model info " + qwen2);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, ::testing::AllOf(::testing::HasSubstr("architecture: Qwen2"),
                                         ::testing::HasSubstr("q/k/v biases (none on o_proj)"),
                                         ::testing::HasSubstr("rope: default (theta 1e+06)")));
}

// A save_pretrained directory of Gemma3ForConditionalGeneration (model_type "gemma3") is refused by
// every command that reads a model, in one line naming "text_config" and the text-only checkpoint
// to give instead.
TEST_F(HfFamilyCli, Gemma3MultimodalCheckpointIsRefusedNamingTextConfig) {
  const std::string dir = (fixtures() / "refused" / "gemma3_multimodal").string();
  const std::string data = path("data");
  {
    data::TokenDatasetWriter w(data, {.vocab_size = 96, .tokenizer_id = "fixture"});
    w.add_document(std::vector<int32_t>(70, 5));
    w.finish();
  }
  for (const std::string& command : {"model info " + dir, "eval --model " + dir + " --data " + data + " --seq-len 64",
                                     "train --model " + dir + " --init-weights " + dir + " --data " + data +
                                         " --steps 1 --seq-len 64 --global-batch-tokens 64"}) {
    SCOPED_TRACE(command);
    const testing::CommandResult r = testing::run_hspmd(command);
    EXPECT_NE(r.code, 0);
    EXPECT_THAT(r.output, ::testing::AllOf(::testing::HasSubstr("\"model_type\" \"gemma3\" is Gemma3ForConditionalGeneration"),
                                           ::testing::HasSubstr("\"text_config\""),
                                           ::testing::HasSubstr("\"model_type\": \"gemma3_text\"")));
  }
}

// A family's weights in, trained under a strategy, and out again: `train --init-weights` of a
// save_pretrained directory (TP 2 next to a 2-stage pipeline), `checkpoint export --to-hf` writes
// the family's config.json and Hugging Face names, and the export evaluates like the checkpoint.
TEST_F(HfFamilyCli, TrainedFromHuggingFaceWeightsAndExportedBack) {
  const std::string data = path("data");
  {
    data::TokenDatasetWriter w(data, {.vocab_size = 96, .tokenizer_id = "fixture"});
    for (const std::string& variant : kVariants) {
      for (const auto& doc : documents_of(expected_of(variant))) {
        w.add_document(std::vector<int32_t>(doc.begin(), doc.end()));
      }
    }
    w.finish();
  }
  std::ofstream(path("hetero.json")) << R"({"name": "hetero", "zero1": true, "pipelines": [
    {"micro_batch_size": 1, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-1"}]},
    {"micro_batch_size": 1, "num_micro_batches": 1,
     "stages": [{"ranks": "2", "layers": "0"}, {"ranks": "3", "layers": "1"}]}]})";
  for (const std::string variant : {"qwen3", "gemma3"}) {
    SCOPED_TRACE(variant);
    const std::string dir = (fixtures() / variant).string();
    const std::string ckpt = path("ckpt-" + variant), hf = path("hf-" + variant);
    testing::CommandResult r = testing::run_hspmd(
        "train --model " + dir + " --init-weights " + dir + " --data " + data +
        " --steps 2 --seq-len 64 --global-batch-tokens 256 --warmup 1 --threads 1 --nproc 4 --strategy " +
        path("hetero.json") + " --save " + ckpt);
    ASSERT_EQ(r.code, 0) << r.output;
    r = testing::run_hspmd("checkpoint export " + ckpt + " --to-hf " + hf);
    ASSERT_EQ(r.code, 0) << r.output;
    const nlohmann::json exported = nlohmann::json::parse(std::ifstream(fs::path(hf) / "config.json"));
    EXPECT_EQ(exported.at("model_type"), models::load_model(dir)->config_json().at("model_type"));
    EXPECT_EQ(models::load_model(hf)->config_json(), models::load_model(dir)->config_json());
    r = testing::run_hspmd("model info " + hf + " --weights " + hf);
    EXPECT_EQ(r.code, 0) << r.output;
    const std::string eval = " --data " + data + " --seq-len 64 --threads 1";
    const testing::CommandResult from_hf = testing::run_hspmd("eval --model " + hf + eval);
    const testing::CommandResult from_ckpt = testing::run_hspmd("eval --model " + dir + " --weights " + ckpt + eval);
    const testing::CommandResult untrained = testing::run_hspmd("eval --model " + dir + eval);
    ASSERT_EQ(from_hf.code, 0) << from_hf.output;
    ASSERT_EQ(from_ckpt.code, 0) << from_ckpt.output;
    const auto loss = [](const std::string& out) { return out.substr(out.find("mean loss"), 20); };
    EXPECT_EQ(loss(from_hf.output), loss(from_ckpt.output));
    EXPECT_NE(loss(from_hf.output), loss(untrained.output)) << "training changed nothing";
  }
}

}  // namespace
}  // namespace hspmd::runtime
