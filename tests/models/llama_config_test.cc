#include <gtest/gtest.h>

#include "hspmd/core/error.h"
#include "hspmd/models/llama_config.h"

namespace hspmd::models {
namespace {

TEST(LlamaConfig, ParsesHuggingFaceConfigAndListsParameters) {
  LlamaConfig c = LlamaConfig::from_json_text(R"({"hidden_size": 16, "intermediate_size": 40,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 50,
      "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16"})", "config.json");
  EXPECT_EQ(c.head_dim(), 4);
  EXPECT_EQ(c.rope_theta, 10000.0);
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
  EXPECT_THROW(LlamaConfig::from_file("/nonexistent/config.json"), Error);
}

}  // namespace
}  // namespace hspmd::models
