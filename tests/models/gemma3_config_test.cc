// The Gemma 3 text family (models/gemma3_config.h): every key transformers 5.x writes, the
// transformers < 5 spelling of its RoPE and sliding pattern, what is refused naming the key, and the
// round trip through config.json.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "error_of.h"
#include "hspmd/models/llama_config.h"
#include "hspmd/models/llama_model.h"

namespace hspmd::models {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

LlamaConfig parse(const std::string& extra = "") {
  return LlamaConfig::from_json_text(R"({"model_type": "gemma3_text", "hidden_size": 16, "intermediate_size": 40,
      "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 50)" +
                                         (extra.empty() ? "" : ", " + extra) + "}",
                                     "gemma/config.json");
}

std::string error_parsing(const std::string& extra) {
  return testing::error_of([&] { parse(extra); });
}

TEST(Gemma3Config, ReadsWhatTransformersWrites) {
  const LlamaConfig c = parse(R"("_sliding_window_pattern": 6, "architectures": ["Gemma3ForCausalLM"],
      "attention_bias": false, "attn_logit_softcapping": null, "final_logit_softcapping": 30.0, "head_dim": 8,
      "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 12, "sliding_window": 8,
      "layer_types": ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
      "rope_parameters": {"full_attention": {"rope_theta": 1000000.0, "rope_type": "default"},
                          "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}},
      "use_bidirectional_attention": false, "tie_word_embeddings": true, "use_cache": true, "pad_token_id": 0)");
  const DecoderOptions& d = c.decoder;
  EXPECT_EQ(d.model_type, "gemma3_text");
  EXPECT_TRUE(d.qk_norm && d.sandwich_norms && d.scale_embeddings);
  EXPECT_EQ(d.norm_weight_offset, 1.0);
  EXPECT_EQ(d.activation, MlpActivation::kGeluTanh);
  EXPECT_EQ(d.query_pre_attn_scalar, 12);
  EXPECT_EQ(d.final_logit_softcap, 30.0);
  EXPECT_EQ(d.sliding_layers, (std::vector<bool>{true, true, false, true}));
  EXPECT_EQ(d.window_of(2), 0);
  EXPECT_EQ(d.window_of(3), 8);
  EXPECT_EQ(c.rope.theta, 1e6);
  ASSERT_TRUE(d.sliding_rope.has_value());
  EXPECT_EQ(d.sliding_rope->theta, 1e4);
  EXPECT_TRUE(c.tie_word_embeddings);

  // A layer: input_layernorm, q/k/v/o, q_norm, k_norm, post_attention_layernorm,
  // pre_feedforward_layernorm, gate/up/down, post_feedforward_layernorm.
  std::vector<std::string> layer0;
  for (const LlamaParam& p : llama_parameters(c)) {
    if (p.layer == 0) layer0.push_back(p.name.substr(std::string("model.layers.0.").size()));
  }
  EXPECT_EQ(layer0, (std::vector<std::string>{
                        "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                        "self_attn.v_proj.weight", "self_attn.o_proj.weight", "self_attn.q_norm.weight",
                        "self_attn.k_norm.weight", "post_attention_layernorm.weight",
                        "pre_feedforward_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                        "mlp.down_proj.weight", "post_feedforward_layernorm.weight"}));
}

TEST(Gemma3Config, DefaultsAreTransformers) {
  const LlamaConfig c = parse();
  EXPECT_EQ(c.head_dim(), 256);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.decoder.query_pre_attn_scalar, 256);
  EXPECT_EQ(c.decoder.sliding_window, 4096);
  EXPECT_EQ(c.decoder.final_logit_softcap, 0);
  // Every 6th layer global (sliding_window_pattern 6): all 4 slide.
  EXPECT_EQ(c.decoder.sliding_layers, (std::vector<bool>{true, true, true, true}));
  EXPECT_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.decoder.sliding_rope->theta, 1e4);
  EXPECT_EQ(c.pad_token_id, 0);
}

// pad_token_id: the embedding row without gradient (transformers' padding_idx); Gemma's default is 0,
// null says none, and the choice survives config.json.
TEST(Gemma3Config, PadTokenIdDefaultsToZeroAndNullMeansNone) {
  EXPECT_EQ(parse(R"("pad_token_id": 3)").pad_token_id, 3);
  const LlamaConfig none = parse(R"("pad_token_id": null)");
  EXPECT_EQ(none.pad_token_id, -1);
  EXPECT_EQ(LlamaConfig::from_json_text(none.to_json_text(), "round trip").pad_token_id, -1);
  EXPECT_EQ(LlamaConfig::from_json_text(parse().to_json_text(), "round trip").pad_token_id, 0);
  EXPECT_THAT(error_parsing(R"("pad_token_id": 50)"),
              AllOf(HasSubstr("gemma/config.json"),
                    HasSubstr("\"pad_token_id\" is 50, not an id of the vocabulary")));
}

TEST(Gemma3Config, ReadsTheTransformers4Keys) {
  const LlamaConfig c = parse(R"("rope_theta": 500000, "rope_local_base_freq": 20000,
      "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "sliding_window_pattern": 2,
      "cache_implementation": "hybrid", "torch_dtype": "bfloat16")");
  EXPECT_EQ(c.decoder.sliding_layers, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(c.rope.type, RopeType::kLinear);
  EXPECT_EQ(c.rope.theta, 500000);
  EXPECT_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.decoder.sliding_rope->type, RopeType::kDefault);
  EXPECT_EQ(c.decoder.sliding_rope->theta, 20000);
  EXPECT_EQ(c.weights_dtype, "bfloat16");
}

TEST(Gemma3Config, RefusesWhatItDoesNotComputeNamingTheKey) {
  EXPECT_THAT(error_parsing(R"("attn_logit_softcapping": 50.0)"),
              AllOf(HasSubstr("gemma/config.json"), HasSubstr("\"attn_logit_softcapping\" is 50.0")));
  EXPECT_THAT(error_parsing(R"("query_pre_attn_scalar": 24.5)"),
              HasSubstr("\"query_pre_attn_scalar\" must be an integer"));
  EXPECT_THAT(error_parsing(R"("use_bidirectional_attention": true)"),
              HasSubstr("\"use_bidirectional_attention\" is true"));
  EXPECT_THAT(error_parsing(R"("hidden_activation": "gelu")"), HasSubstr("\"hidden_activation\" is \"gelu\""));
  EXPECT_THAT(error_parsing(R"("hidden_act": "gelu_pytorch_tanh")"), HasSubstr("unknown key \"hidden_act\""));
  EXPECT_THAT(error_parsing(R"("rope_parameters": {"rope_type": "default", "rope_theta": 10000.0})"),
              HasSubstr("one RoPE per layer type"));
  EXPECT_THAT(error_parsing(R"("rope_theta": 10000, "rope_parameters": {"full_attention": {"rope_type": "default"}})"),
              HasSubstr("both \"rope_parameters\" and \"rope_theta\""));
  EXPECT_THAT(error_parsing(R"("rope_parameters": {"sliding_attention": {"rope_type": "dynamic", "factor": 2.0}})"),
              HasSubstr("\"rope_parameters.sliding_attention.rope_type\" is \"dynamic\""));
  EXPECT_THAT(error_parsing(R"("sliding_window": null)"),
              HasSubstr("names sliding_attention layers but the config sets no sliding_window"));
  EXPECT_THAT(error_parsing(R"("architectures": ["Gemma3ForConditionalGeneration"])"),
              HasSubstr("\"architectures\" is"));
}

// The multimodal checkpoint (Gemma3ForConditionalGeneration) is refused in one line that names
// "text_config" and says which checkpoint to give instead.
TEST(Gemma3Config, TheMultimodalCheckpointIsRefusedNamingItsTextConfig) {
  const std::string error = testing::error_of([] {
    LlamaConfig::from_json_text(R"({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "text_config": {"model_type": "gemma3_text", "hidden_size": 16, "intermediate_size": 40,
                        "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 50},
        "vision_config": {"model_type": "siglip_vision_model"}, "mm_tokens_per_image": 256})",
                                "gemma-4b/config.json");
  });
  EXPECT_THAT(error, AllOf(HasSubstr("gemma-4b/config.json"), HasSubstr("\"text_config\""),
                           HasSubstr("Gemma3ForConditionalGeneration"), HasSubstr("\"model_type\": \"gemma3_text\""),
                           Not(HasSubstr("\n"))));
}

TEST(Gemma3Config, RoundTripsThroughItsConfigJson) {
  for (const LlamaConfig& c :
       {parse(R"("head_dim": 8, "final_logit_softcapping": 2.0, "attention_bias": true, "sliding_window": 6,
            "tie_word_embeddings": false, "layer_types": ["sliding_attention", "full_attention",
            "sliding_attention", "full_attention"], "rope_parameters": {"full_attention": {"rope_type": "linear",
            "rope_theta": 100000.0, "factor": 4.0}, "sliding_attention": {"rope_theta": 1000.0}})"),
        parse(R"("rope_theta": 500000, "rope_local_base_freq": 20000, "sliding_window_pattern": 2)")}) {
    const LlamaConfig round = LlamaConfig::from_json_text(c.to_json_text(), "round trip");
    EXPECT_EQ(round.to_json_text(), c.to_json_text());
    EXPECT_EQ(round.decoder, c.decoder);
    EXPECT_EQ(round.rope, c.rope);
    EXPECT_EQ(round.num_parameters(), c.num_parameters());
  }
}

// The profiler times the same model with 1 and 3 layers: the local/global pattern repeats.
TEST(Gemma3Config, FewerLayersKeepTheSlidingPattern) {
  const LlamaConfig c = parse(R"("sliding_window": 8, "layer_types": ["sliding_attention", "full_attention",
      "sliding_attention", "full_attention"])");
  const nlohmann::json three = llama(c)->with_num_layers(3)->config_json();
  EXPECT_EQ(three.at("layer_types"), nlohmann::json({"sliding_attention", "full_attention", "sliding_attention"}));
  EXPECT_EQ(llama(c)->with_num_layers(1)->config_json().at("layer_types"), nlohmann::json({"sliding_attention"}));
}

}  // namespace
}  // namespace hspmd::models
