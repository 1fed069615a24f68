// The Mistral family (models/mistral_config.h): one sliding window on every layer, from
// "sliding_window" (null: none; absent: transformers' default 4096), and the round trip.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "error_of.h"
#include "hspmd/models/llama_config.h"

namespace hspmd::models {
namespace {

using ::testing::HasSubstr;

LlamaConfig parse(const std::string& extra = "") {
  return LlamaConfig::from_json_text(R"({"model_type": "mistral", "hidden_size": 16, "intermediate_size": 40,
      "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 50)" +
                                         (extra.empty() ? "" : ", " + extra) + "}",
                                     "mistral/config.json");
}

TEST(MistralConfig, EveryLayerSlidesWithTheWindow) {
  LlamaConfig c = parse(R"("sliding_window": 8, "head_dim": 8, "architectures": ["MistralForCausalLM"])");
  EXPECT_EQ(c.decoder.model_type, "mistral");
  EXPECT_EQ(c.head_dim(), 8);
  for (int l = 0; l < 3; ++l) EXPECT_EQ(c.decoder.window_of(l), 8) << l;
  EXPECT_FALSE(c.decoder.qk_norm);
  EXPECT_EQ(llama_parameters(c).size(), llama_parameters(LlamaConfig{}).size() + 9u);  // 3 layers, not 2
  // null: plain causal attention; absent: transformers' default window.
  EXPECT_EQ(parse(R"("sliding_window": null)").decoder.sliding_window, 0);
  EXPECT_TRUE(parse(R"("sliding_window": null)").decoder.sliding_layers.empty());
  EXPECT_EQ(parse().decoder.sliding_window, 4096);
  // transformers' MistralModel ignores layer_types (every layer slides): so does hspmd.
  EXPECT_EQ(parse(R"("sliding_window": 8, "layer_types": ["full_attention", "full_attention", "full_attention"])")
                .decoder.window_of(1),
            8);
}

TEST(MistralConfig, RefusesWhatItDoesNotComputeNamingTheKey) {
  auto error = [](const std::string& extra) { return testing::error_of([&] { parse(extra); }); };
  EXPECT_THAT(error(R"("sliding_window": 0)"), HasSubstr("\"sliding_window\" must be positive or null, got 0"));
  EXPECT_THAT(error(R"("attention_bias": true)"), HasSubstr("unknown key \"attention_bias\""));
  EXPECT_THAT(error(R"("hidden_act": "gelu")"), HasSubstr("\"hidden_act\" is \"gelu\""));
  EXPECT_THAT(error(R"("architectures": ["MixtralForCausalLM"])"), HasSubstr("\"architectures\" is"));
}

TEST(MistralConfig, RoundTripsThroughItsConfigJson) {
  for (const LlamaConfig& c :
       {parse(R"("sliding_window": 8, "rope_theta": 1e6)"), parse(R"("sliding_window": null)")}) {
    const LlamaConfig round = LlamaConfig::from_json_text(c.to_json_text(), "round trip");
    EXPECT_EQ(round.to_json_text(), c.to_json_text());
    EXPECT_EQ(round.decoder, c.decoder);
    EXPECT_EQ(round.rope, c.rope);
  }
}

}  // namespace
}  // namespace hspmd::models
