// The Qwen2 and Qwen3 families (models/qwen_config.h): what each key of a transformers 5.x config
// becomes in the decoder, what is refused naming the key, and the round trip through config.json.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "error_of.h"
#include "hspmd/models/llama_config.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/sharding/strategy.h"

namespace hspmd::models {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A config of `model_type` with 3 layers and the keys in `extra` (a JSON fragment).
LlamaConfig parse(const std::string& model_type, const std::string& extra = "") {
  return LlamaConfig::from_json_text(R"({"model_type": ")" + model_type + R"(", "hidden_size": 16,
      "intermediate_size": 40, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
      "vocab_size": 50)" + (extra.empty() ? "" : ", " + extra) + "}",
                                     "qwen/config.json");
}

std::string error_parsing(const std::string& model_type, const std::string& extra) {
  return testing::error_of([&] { parse(model_type, extra); });
}

TEST(QwenConfig, Qwen3NormsEachQueryAndKeyHead) {
  const LlamaConfig c = parse("qwen3", R"("head_dim": 8)");
  EXPECT_TRUE(c.decoder.qk_norm);
  EXPECT_EQ(c.head_dim(), 8);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);  // transformers' Qwen3 default
  const std::vector<LlamaParam> params = llama_parameters(c);
  ASSERT_EQ(params.size(), 1u + 3 * 11 + 2);
  EXPECT_EQ(params[6].name, "model.layers.0.self_attn.q_norm.weight");
  EXPECT_EQ(params[6].shape, (Shape{8}));
  EXPECT_EQ(params[6].role, LlamaParamRole::kHeadNorm);
  EXPECT_EQ(params[7].name, "model.layers.0.self_attn.k_norm.weight");
  // Without "head_dim" a Qwen3 head is 128 wide, whatever hidden / heads is.
  EXPECT_EQ(parse("qwen3").head_dim(), 128);
  EXPECT_EQ(llama(c)->model_type(), "qwen3");
}

TEST(QwenConfig, Qwen2BiasesQueriesKeysAndValuesButNotTheOutput) {
  const LlamaConfig c = parse("qwen2");
  EXPECT_FALSE(c.decoder.qk_norm);
  std::vector<std::string> biases;
  for (const LlamaParam& p : llama_parameters(c)) {
    if (p.layer == 0 && p.name.ends_with(".bias")) biases.push_back(p.name);
  }
  EXPECT_EQ(biases, (std::vector<std::string>{"model.layers.0.self_attn.q_proj.bias",
                                              "model.layers.0.self_attn.k_proj.bias",
                                              "model.layers.0.self_attn.v_proj.bias"}));
  // Qwen3's attention_bias, like Llama's, covers o_proj too.
  int o_bias = 0;
  for (const LlamaParam& p : llama_parameters(parse("qwen3", R"("attention_bias": true)"))) {
    o_bias += p.name.ends_with("o_proj.bias");
  }
  EXPECT_EQ(o_bias, 3);
}

TEST(QwenConfig, SlidingLayersAsTransformersDerivesThem) {
  // use_sliding_window with a window: the layers from max_window_layers on slide.
  LlamaConfig c = parse("qwen3", R"("use_sliding_window": true, "sliding_window": 8, "max_window_layers": 1)");
  EXPECT_EQ(c.decoder.sliding_window, 8);
  EXPECT_EQ(c.decoder.sliding_layers, (std::vector<bool>{false, true, true}));
  EXPECT_EQ(c.decoder.window_of(0), 0);
  EXPECT_EQ(c.decoder.window_of(2), 8);
  // layer_types, where the config has them, say which.
  c = parse("qwen2", R"("use_sliding_window": true, "sliding_window": 8,
      "layer_types": ["sliding_attention", "full_attention", "sliding_attention"])");
  EXPECT_EQ(c.decoder.sliding_layers, (std::vector<bool>{true, false, true}));
  // Without use_sliding_window transformers drops the window: no layer slides.
  c = parse("qwen3", R"("use_sliding_window": false, "sliding_window": 8, "max_window_layers": 0)");
  EXPECT_EQ(c.decoder.sliding_window, 0);
  EXPECT_TRUE(c.decoder.sliding_layers.empty());
  // The same in every spelling: all full layers are no sliding at all.
  EXPECT_EQ(parse("qwen3", R"("use_sliding_window": true, "sliding_window": 8, "max_window_layers": 3)").decoder,
            parse("qwen3").decoder);
}

TEST(QwenConfig, RefusesWhatItDoesNotComputeNamingTheKey) {
  EXPECT_THAT(error_parsing("qwen2", R"("attention_bias": true)"),
              AllOf(HasSubstr("qwen/config.json"), HasSubstr("unknown key \"attention_bias\"")));
  EXPECT_THAT(error_parsing("qwen3", R"("hidden_act": "gelu")"), HasSubstr("\"hidden_act\" is \"gelu\""));
  EXPECT_THAT(error_parsing("qwen3", R"("architectures": ["Qwen2ForCausalLM"])"),
              HasSubstr("\"architectures\" is [\"Qwen2ForCausalLM\"]"));
  EXPECT_THAT(error_parsing("qwen3", R"("layer_types": ["full_attention"])"),
              HasSubstr("\"layer_types\" has 1 entries for 3 layers"));
  EXPECT_THAT(error_parsing("qwen3", R"("layer_types": ["full_attention", "chunked_attention", "full_attention"])"),
              HasSubstr("\"layer_types\"[1] is \"chunked_attention\""));
  EXPECT_THAT(error_parsing("qwen3", R"("layer_types": ["full_attention", "sliding_attention", "full_attention"])"),
              HasSubstr("names sliding_attention layers but the config sets no sliding_window"));
  EXPECT_THAT(error_parsing("qwen3", R"("rope_parameters": {"rope_type": "dynamic", "factor": 2.0})"),
              HasSubstr("\"rope_parameters.rope_type\" is \"dynamic\""));
  EXPECT_THAT(error_parsing("qwen3", R"("mlp_bias": true)"), HasSubstr("unknown key \"mlp_bias\""));
}

TEST(QwenConfig, RoundTripsThroughItsConfigJson) {
  for (const LlamaConfig& c :
       {parse("qwen3", R"("head_dim": 8, "attention_bias": true, "tie_word_embeddings": true,
            "use_sliding_window": true, "sliding_window": 8, "max_window_layers": 2, "rope_theta": 1e6)"),
        parse("qwen2", R"("use_sliding_window": true, "sliding_window": 4, "max_window_layers": 0)")}) {
    const LlamaConfig round = LlamaConfig::from_json_text(c.to_json_text(), "round trip");
    EXPECT_EQ(round.to_json_text(), c.to_json_text());
    EXPECT_EQ(round.decoder, c.decoder);
    EXPECT_EQ(round.head_dim(), c.head_dim());
    EXPECT_EQ(round.rope, c.rope);
    EXPECT_EQ(round.num_parameters(), c.num_parameters());
  }
}

TEST(QwenConfig, HeadNormsAreWholeOnEveryTensorParallelRank) {
  const LlamaConfig c = parse("qwen3", R"("head_dim": 8)");
  const sharding::Strategy st = sharding::Strategy::from_json_text(
      R"({"name": "tp2", "zero1": true, "pipelines": [{"micro_batch_size": 1, "num_micro_batches": 1,
          "stages": [{"ranks": "0-1", "layers": "0-2"}]}]})",
      "test");
  const sharding::AnnotationPlan plan = compile_llama_plan(c, st);
  EXPECT_EQ(plan.at("model.layers.1.self_attn.q_norm.weight").to_string(), "dup{[0-1](D:2;zero)}");
  EXPECT_EQ(plan.at("model.layers.1.self_attn.k_norm.weight").to_string(), "dup{[0-1](D:2;zero)}");
  EXPECT_EQ(plan.at("model.layers.1.self_attn.q_proj.weight").to_string(), "dup{[0-1](S0:2;zero)}");
}

}  // namespace
}  // namespace hspmd::models
