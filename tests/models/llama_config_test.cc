#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "error_of.h"
#include "hspmd/core/error.h"
#include "hspmd/models/llama_config.h"

namespace hspmd::models {
namespace {

TEST(LlamaConfig, ParsesHuggingFaceConfigAndListsParameters) {
  LlamaConfig c = LlamaConfig::from_json_text(R"({"hidden_size": 16, "intermediate_size": 40,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 50,
      "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16"})", "config.json");
  EXPECT_EQ(c.head_dim(), 4);
  EXPECT_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.rope.type, RopeType::kDefault);
  EXPECT_EQ(c.weights_dtype, "bfloat16");
  auto params = llama_parameters(c);
  ASSERT_EQ(params.size(), 1u + 2 * 9 + 2);
  EXPECT_EQ(params[2].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(params[3].shape, (Shape{8, 16}));  // k_proj: 2 kv heads x 4
  EXPECT_EQ(params.back().name, "lm_head.weight");
  EXPECT_EQ(c.num_parameters(), 50 * 16 * 2 + 16 + 2 * (2 * 16 + 16 * 16 * 2 + 8 * 16 * 2 + 3 * 40 * 16));
  LlamaConfig round = LlamaConfig::from_json_text(c.to_json_text(), "round trip");
  EXPECT_EQ(round.num_parameters(), c.num_parameters());
}

TEST(LlamaConfig, ErrorsNameFileAndKey) {
  auto message = [](const std::string& text) {
    try {
      LlamaConfig::from_json_text(text, "my/config.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("{").find("my/config.json: not valid JSON"), std::string::npos);
  EXPECT_NE(message(R"({"hidden_size": 16})").find("missing required key \"intermediate_size\""),
            std::string::npos);
  EXPECT_NE(message(R"({"hidden_size": "big", "intermediate_size": 1, "num_hidden_layers": 1,
      "num_attention_heads": 1, "vocab_size": 1})").find("\"hidden_size\" has the wrong type"),
            std::string::npos);
  EXPECT_NE(message(R"({"hidden_size": 16, "intermediate_size": 1, "num_hidden_layers": 1,
      "num_attention_heads": 3, "vocab_size": 1})").find("must divide hidden_size"),
            std::string::npos);
  // A float where an integer belongs is refused, not truncated (1.5) or converted out of range
  // (2.6e102, undefined behaviour: a fuzz finding); an integer beyond the key's type likewise.
  for (const char* size : {"1.5", "2.6e102", "9223372036854775808"}) {
    EXPECT_NE(message(std::string(R"({"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 1,
        "vocab_size": 1, "intermediate_size": )") + size + "}")
                  .find("key \"intermediate_size\" must be an integer from"),
              std::string::npos)
        << size;
  }
  EXPECT_THROW(LlamaConfig::from_file("/nonexistent/config.json"), Error);
}

using hspmd::testing::error_of;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A small config with `extra` keys spliced in (JSON object members, without braces).
LlamaConfig parse(const std::string& extra) {
  return LlamaConfig::from_json_text(R"({"hidden_size": 16, "intermediate_size": 40, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 50)" +
                                         (extra.empty() ? "" : ", " + extra) + "}",
                                     "my/config.json");
}
std::string error_parsing(const std::string& extra) { return error_of([&] { parse(extra); }); }

TEST(LlamaConfig, ReadsRopeFromEitherGeneration) {
  // transformers < 5
  LlamaConfig old_style = parse(R"("rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})");
  EXPECT_EQ(old_style.rope.type, RopeType::kLlama3);
  EXPECT_EQ(old_style.rope.theta, 500000.0);
  EXPECT_EQ(old_style.rope.original_max_position_embeddings, 8192);
  // transformers >= 5
  LlamaConfig new_style = parse(R"("rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})");
  EXPECT_EQ(new_style.rope, old_style.rope);
  // The issue's case: only rope_parameters, theta 500000, no top-level rope_theta.
  EXPECT_EQ(parse(R"("rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"})").rope.theta, 500000.0);
  // Older spelling "type"; "rope_scaling": null means no scaling.
  EXPECT_EQ(parse(R"("rope_scaling": {"type": "linear", "factor": 2.0})").rope.type, RopeType::kLinear);
  EXPECT_EQ(parse(R"("rope_theta": 1e6, "rope_scaling": null)").rope, (RopeParameters{.theta = 1e6}));
  // Both generations, agreeing: fine (a lone rope_theta says nothing about scaling).
  EXPECT_EQ(parse(R"("rope_theta": 500000.0, "rope_parameters": {"rope_type": "linear", "rope_theta": 500000.0,
      "factor": 2.0})").rope.factor, 2.0);
  // The config round-trips through to_json_text (transformers >= 5 form).
  EXPECT_EQ(LlamaConfig::from_json_text(new_style.to_json_text(), "round trip").rope, new_style.rope);
}

TEST(LlamaConfig, DisagreeingGenerationsNameBothKeys) {
  EXPECT_THAT(error_parsing(R"("rope_theta": 10000.0, "rope_parameters": {"rope_type": "default",
      "rope_theta": 500000.0})"),
              AllOf(HasSubstr("my/config.json"), HasSubstr("\"rope_parameters\" says default (theta 500000)"),
                    HasSubstr("\"rope_theta\" says default (theta 10000)"), HasSubstr("must agree")));
  EXPECT_THAT(error_parsing(R"("rope_scaling": {"rope_type": "linear", "factor": 2.0},
      "rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0})"),
              AllOf(HasSubstr("\"rope_parameters\" says linear (theta 10000, factor 4)"),
                    HasSubstr("\"rope_scaling\" says linear (theta 10000, factor 2)")));
}

TEST(LlamaConfig, RefusesRopeTypesAndKeysItDoesNotCompute) {
  EXPECT_THAT(error_parsing(R"("rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4, "factor": 4.0})"),
              AllOf(HasSubstr("my/config.json"), HasSubstr("\"rope_parameters.rope_type\" is \"longrope\""),
                    HasSubstr("supported: default, linear, llama3, yarn")));
  EXPECT_THAT(error_parsing(R"("rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0})"),
              HasSubstr("\"rope_parameters\" of type yarn needs \"original_max_position_embeddings\""));
  EXPECT_THAT(error_parsing(R"("rope_scaling": {"type": "dynamic", "factor": 2.0})"),
              HasSubstr("\"rope_scaling.type\" is \"dynamic\""));
  EXPECT_THAT(error_parsing(R"("rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
      "partial_rotary_factor": 0.5})"),
              HasSubstr("\"rope_parameters.partial_rotary_factor\" is not used"));
  EXPECT_THAT(error_parsing(R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0})"),
              HasSubstr("\"rope_scaling\" of type llama3 needs \"low_freq_factor\""));
}

TEST(LlamaConfig, EveryKeyThatChangesTheMathIsReadOrRefused) {
  EXPECT_THAT(error_parsing(R"("attention_bias": 1)"),
              AllOf(HasSubstr("my/config.json"), HasSubstr("\"attention_bias\" has the wrong type")));
  EXPECT_THAT(error_parsing(R"("hidden_act": "gelu")"), HasSubstr("\"hidden_act\" is \"gelu\""));
  EXPECT_THAT(error_parsing(R"("attention_dropout": 0.1)"), HasSubstr("\"attention_dropout\" is 0.1"));
  EXPECT_THAT(error_parsing(R"("model_type": "phi3")"), HasSubstr("\"model_type\" is \"phi3\""));
  EXPECT_THAT(error_parsing(R"("architectures": ["LlamaForSequenceClassification"])"),
              HasSubstr("\"architectures\" is [\"LlamaForSequenceClassification\"]"));
  EXPECT_THAT(error_parsing(R"("torch_dtype": "float16")"), HasSubstr("\"torch_dtype\" is \"float16\""));
  EXPECT_THAT(error_parsing(R"("torch_dtype": "float32", "dtype": "bfloat16")"),
              HasSubstr("\"torch_dtype\" is \"float32\" but \"dtype\" is \"bfloat16\""));
  EXPECT_THAT(error_parsing(R"("sliding_window": 4096, "quantization_config": {})"),
              AllOf(HasSubstr("unknown keys \"quantization_config\", \"sliding_window\""),
                    HasSubstr("docs/model-config.md")));
  // Values under which hspmd computes the model, and keys without effect, are accepted.
  LlamaConfig c = parse(R"("attention_bias": false, "mlp_bias": false, "hidden_act": "swish",
      "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": [2, 3], "pad_token_id": null, "use_cache": true,
      "pretraining_tp": 1, "initializer_range": 0.02, "transformers_version": "5.24.0", "dtype": "float32",
      "model_type": "llama", "architectures": ["LlamaForCausalLM"], "rms_norm_eps": 0.05,
      "tie_word_embeddings": true)");
  EXPECT_EQ(c.rms_norm_eps, 0.05);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.weights_dtype, "float32");
}

TEST(LlamaConfig, BiasesFollowTheirProjections) {
  LlamaConfig c = parse(R"("attention_bias": true, "mlp_bias": true)");
  auto params = llama_parameters(c);
  ASSERT_EQ(params.size(), 1u + 2 * (9 + 7) + 2);
  EXPECT_EQ(params[3].name, "model.layers.0.self_attn.q_proj.bias");
  EXPECT_EQ(params[3].shape, (Shape{16}));
  EXPECT_EQ(params[5].name, "model.layers.0.self_attn.k_proj.bias");
  EXPECT_EQ(params[5].shape, (Shape{8}));  // 2 kv heads x 4
  EXPECT_EQ(params[9].name, "model.layers.0.self_attn.o_proj.bias");
  EXPECT_EQ(params[9].role, LlamaParamRole::kOBias);
  EXPECT_EQ(params[16].name, "model.layers.0.mlp.down_proj.bias");
  EXPECT_EQ(params[16].shape, (Shape{16}));
  EXPECT_EQ(c.num_parameters(), parse("").num_parameters() + 2 * (16 + 8 + 8 + 16 + 40 + 40 + 16));
  LlamaConfig round = LlamaConfig::from_json_text(c.to_json_text(), "round trip");
  EXPECT_TRUE(round.attention_bias && round.mlp_bias);
}

TEST(LlamaConfig, ExplicitHeadDimSetsProjectionShapes) {
  LlamaConfig c = parse(R"("head_dim": 6)");  // 4 heads of 6 over hidden 16
  EXPECT_EQ(c.head_dim(), 6);
  auto params = llama_parameters(c);
  EXPECT_EQ(params[2].shape, (Shape{24, 16}));  // q_proj
  EXPECT_EQ(params[3].shape, (Shape{12, 16}));  // k_proj: 2 kv heads x 6
  EXPECT_EQ(params[5].shape, (Shape{16, 24}));  // o_proj
  EXPECT_EQ(LlamaConfig::from_json_text(c.to_json_text(), "round trip").head_dim(), 6);
  EXPECT_EQ(parse(R"("head_dim": 4)").explicit_head_dim, 0);  // the quotient itself: nothing special
  EXPECT_THAT(error_parsing(R"("head_dim": 5)"), HasSubstr("head dim 5 must be even"));
  // Heads need not divide hidden_size when head_dim says how wide they are.
  EXPECT_EQ(LlamaConfig::from_json_text(R"({"hidden_size": 18, "intermediate_size": 8, "num_hidden_layers": 1,
      "num_attention_heads": 4, "vocab_size": 8, "head_dim": 8})", "c").head_dim(), 8);
}

TEST(RopeParameters, YarnScalesCosAndSin) {
  LlamaConfig c = parse(R"("rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
      "original_max_position_embeddings": 32})");
  EXPECT_EQ(c.rope.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope.cos_sin_scale(), 0.1 * std::log(4.0) + 1.0);
  c.rope.mscale = 0.9;
  c.rope.mscale_all_dim = 0.5;
  EXPECT_DOUBLE_EQ(c.rope.cos_sin_scale(), (0.09 * std::log(4.0) + 1.0) / (0.05 * std::log(4.0) + 1.0));
  c.rope.attention_factor = 1.5;  // explicit: wins
  EXPECT_EQ(c.rope.cos_sin_scale(), 1.5);
  EXPECT_EQ(LlamaConfig::from_json_text(c.to_json_text(), "round trip").rope, c.rope);
  EXPECT_EQ(RopeParameters{.type = RopeType::kLlama3}.cos_sin_scale(), 1.0);
}

TEST(RopeParameters, InverseFrequenciesPerType) {
  // Default: theta^(-2i/D) (in float32).
  RopeParameters d{.theta = 10000.0};
  std::vector<double> f = d.inverse_frequencies(8);
  ASSERT_EQ(f.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[i], std::pow(10000.0, -2.0 * i / 8), 1e-7 * f[i]);
  // Linear: every frequency divided by factor.
  RopeParameters lin{.type = RopeType::kLinear, .theta = 10000.0, .factor = 4.0};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(lin.inverse_frequencies(8)[i], f[i] / 4, 1e-7 * f[i]);
  // Llama 3: wavelengths 6.3 (kept: below 64/4), 63 (blended), 628 and 6283 (above 64: divided by 8).
  RopeParameters l3{.type = RopeType::kLlama3, .theta = 10000.0, .factor = 8.0, .low_freq_factor = 1.0,
                    .high_freq_factor = 4.0, .original_max_position_embeddings = 64};
  std::vector<double> s = l3.inverse_frequencies(8);
  EXPECT_EQ(s[0], f[0]);
  const double smooth = (64.0 / (2 * M_PI / 0.1) - 1.0) / 3.0;
  EXPECT_NEAR(s[1], (1 - smooth) * 0.1 / 8 + smooth * 0.1, 1e-6 * s[1]);
  EXPECT_NEAR(s[2], f[2] / 8, 1e-7 * f[2]);
  EXPECT_NEAR(s[3], f[3] / 8, 1e-7 * f[3]);
}

}  // namespace
}  // namespace hspmd::models
