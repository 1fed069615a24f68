#include "gpu/decoder_configs_testlib.h"

#include "hspmd/models/model_factory.h"

namespace hspmd::testing {

const std::vector<DecoderConfig>& decoder_configs() {
  static const std::vector<DecoderConfig> configs{
      {"llama-tiny", R"({"model_type": "llama", "hidden_size": 128, "intermediate_size": 352,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 260,
          "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 512,
          "tie_word_embeddings": false})"},
      {"qwen3-bias", R"({"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 176,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24,
          "vocab_size": 260, "hidden_act": "silu", "rms_norm_eps": 1e-6,
          "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "max_position_embeddings": 512,
          "tie_word_embeddings": false, "attention_bias": true, "use_sliding_window": false,
          "sliding_window": null, "layer_types": ["full_attention", "full_attention"], "dtype": "float32"})"},
      {"mistral-tiny", R"({"model_type": "mistral", "hidden_size": 64, "intermediate_size": 176,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
          "vocab_size": 260, "hidden_act": "silu", "rms_norm_eps": 1e-6,
          "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, "max_position_embeddings": 512,
          "sliding_window": 16, "tie_word_embeddings": false, "dtype": "float32"})"},
      {"gemma3-tiny", R"({"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 176,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
          "vocab_size": 260, "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6,
          "query_pre_attn_scalar": 24, "sliding_window": 16,
          "layer_types": ["sliding_attention", "full_attention"],
          "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                              "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
          "max_position_embeddings": 512, "final_logit_softcapping": 30.0, "attn_logit_softcapping": null,
          "attention_bias": false, "use_bidirectional_attention": false, "tie_word_embeddings": true,
          "pad_token_id": 0, "dtype": "float32"})"},
  };
  return configs;
}

std::shared_ptr<const models::Model> decoder_model(const DecoderConfig& config) {
  return models::model_from_config_text(config.json, config.name);
}

}  // namespace hspmd::testing
