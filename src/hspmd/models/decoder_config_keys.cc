#include "hspmd/models/decoder_config_keys.h"

namespace hspmd::models {

const std::set<std::string>& shared_decoder_keys() {
  static const std::set<std::string> keys{
      "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
      "vocab_size", "head_dim", "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings", "torch_dtype",
      "dtype", "model_type", "architectures", "attention_dropout", "is_decoder", "is_encoder_decoder",
      "add_cross_attention", "tie_encoder_decoder", "pruned_heads"};
  return keys;
}

void read_shared_decoder_keys(const ConfigReader& r, const std::string& architecture, LlamaConfig& c) {
  if (r.has("architectures")) r.expect("architectures", nlohmann::json::array({architecture}), "another model head");
  r.expect("attention_dropout", 0.0, "training would drop attention weights");
  r.expect("is_decoder", false, "a decoder of an encoder-decoder model");
  r.expect("is_encoder_decoder", false, "an encoder-decoder model");
  r.expect("add_cross_attention", false, "cross-attention layers");
  r.expect("tie_encoder_decoder", false, "an encoder-decoder model");
  r.expect("pruned_heads", nlohmann::json::object(), "pruned attention heads");

  r.require("hidden_size", c.hidden_size);
  r.require("intermediate_size", c.intermediate_size);
  r.require("num_hidden_layers", c.num_hidden_layers);
  r.require("num_attention_heads", c.num_attention_heads);
  c.num_key_value_heads = c.num_attention_heads;  // Hugging Face default: multi-head attention
  r.read("num_key_value_heads", c.num_key_value_heads);
  r.require("vocab_size", c.vocab_size);
  r.read("head_dim", c.explicit_head_dim);
  r.read("rms_norm_eps", c.rms_norm_eps);
  r.read("max_position_embeddings", c.max_position_embeddings);
  r.read("tie_word_embeddings", c.tie_word_embeddings);
  c.weights_dtype = r.weights_dtype();
  // null says "no padding id" even where the family defaults to one (Gemma 3: 0).
  if (r.json().contains("pad_token_id") && r.json().at("pad_token_id").is_null()) c.pad_token_id = -1;
  r.read("pad_token_id", c.pad_token_id);
  HSPMD_CHECK(!r.has("pad_token_id") || (c.pad_token_id >= 0 && c.pad_token_id < c.vocab_size))
      << r.source() << ": \"pad_token_id\" is " << c.pad_token_id << ", not an id of the vocabulary [0, "
      << c.vocab_size << ") (vocab_size)";
  // A head wider or narrower than hidden/heads is fine; saying the quotient itself is too.
  if (c.explicit_head_dim > 0 && c.num_attention_heads > 0 &&
      c.explicit_head_dim * c.num_attention_heads == c.hidden_size) {
    c.explicit_head_dim = 0;
  }
}

nlohmann::json shared_decoder_json(const LlamaConfig& c, const std::string& architecture) {
  nlohmann::json j{{"architectures", {architecture}},
                   {"model_type", c.decoder.model_type},
                   {"hidden_size", c.hidden_size},
                   {"intermediate_size", c.intermediate_size},
                   {"num_hidden_layers", c.num_hidden_layers},
                   {"num_attention_heads", c.num_attention_heads},
                   {"num_key_value_heads", c.num_key_value_heads},
                   {"head_dim", c.head_dim()},
                   {"vocab_size", c.vocab_size},
                   {"rms_norm_eps", c.rms_norm_eps},
                   {"max_position_embeddings", c.max_position_embeddings},
                   {"tie_word_embeddings", c.tie_word_embeddings},
                   {"dtype", c.weights_dtype}};
  if (c.pad_token_id >= 0) j["pad_token_id"] = c.pad_token_id;
  return j;
}

void expect_silu(const ConfigReader& r, const std::string& key) {
  if (r.has(key) && r.json().at(key) == "swish") return;  // swish is silu
  r.expect(key, "silu", "the MLP is silu(gate) * up");
}

std::vector<bool> read_sliding_layers(const ConfigReader& r, int64_t layers) {
  if (!r.has("layer_types")) return {};
  std::vector<std::string> types;
  r.read("layer_types", types);
  HSPMD_CHECK(static_cast<int64_t>(types.size()) == layers)
      << r.source() << ": \"layer_types\" has " << types.size() << " entries for " << layers
      << " layers (num_hidden_layers)";
  std::vector<bool> sliding;
  for (size_t l = 0; l < types.size(); ++l) {
    HSPMD_CHECK(types[l] == "sliding_attention" || types[l] == "full_attention")
        << r.source() << ": \"layer_types\"[" << l << "] is \"" << types[l]
        << "\", which hspmd does not compute (supported: \"full_attention\", \"sliding_attention\")";
    sliding.push_back(types[l] == "sliding_attention");
  }
  return sliding;
}

}  // namespace hspmd::models
