#include "hspmd/models/llama_config.h"

#include <cstdint>
#include <filesystem>
#include <limits>
#include <set>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

#include "hspmd/core/error.h"
#include "hspmd/core/json_file.h"

namespace hspmd::models {

namespace {

template <typename T>
void read_key(const nlohmann::json& j, const char* key, T& out, bool required, const std::string& source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    HSPMD_CHECK(!required) << source << ": missing required key \"" << key << "\"";
    return;
  }
  // nlohmann converts a float to an integer type without a range check (undefined behaviour for
  // 2.7e102, found by fuzz/llama_config_fuzz.cc), and 1.5 would silently become 1: integer keys
  // take integers in the type's range only.
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const bool in_range = !it->is_number()          ? true  // the wrong type: said below
                          : it->is_number_unsigned() ? std::in_range<T>(it->template get<uint64_t>())
                          : it->is_number_integer()  ? std::in_range<T>(it->template get<int64_t>())
                                                     : false;
    HSPMD_CHECK(in_range) << source << ": key \"" << key << "\" must be an integer from "
                          << +std::numeric_limits<T>::min() << " to " << +std::numeric_limits<T>::max() << ", got "
                          << it->dump();
  }
  try {
    out = it->get<T>();
  } catch (const nlohmann::json::exception&) {
    HSPMD_THROW() << source << ": key \"" << key << "\" has the wrong type (" << it->type_name() << ")";
  }
}

}  // namespace

void LlamaConfig::validate() const {
  HSPMD_CHECK(hidden_size > 0) << "hidden_size must be positive, got " << hidden_size;
  HSPMD_CHECK(intermediate_size > 0) << "intermediate_size must be positive, got " << intermediate_size;
  HSPMD_CHECK(num_hidden_layers > 0) << "num_hidden_layers must be positive, got " << num_hidden_layers;
  HSPMD_CHECK(num_attention_heads > 0) << "num_attention_heads must be positive, got " << num_attention_heads;
  HSPMD_CHECK(explicit_head_dim >= 0) << "head_dim must be positive, got " << explicit_head_dim;
  HSPMD_CHECK(explicit_head_dim > 0 || hidden_size % num_attention_heads == 0)
      << "num_attention_heads " << num_attention_heads << " must divide hidden_size " << hidden_size
      << " (or \"head_dim\" must say how wide a head is)";
  HSPMD_CHECK(head_dim() % 2 == 0) << "head dim " << head_dim() << " must be even for rotary embeddings";
  HSPMD_CHECK(num_key_value_heads > 0 && num_attention_heads % num_key_value_heads == 0)
      << "num_key_value_heads " << num_key_value_heads << " must divide num_attention_heads "
      << num_attention_heads;
  HSPMD_CHECK(vocab_size > 0) << "vocab_size must be positive, got " << vocab_size;
  HSPMD_CHECK(rms_norm_eps > 0) << "rms_norm_eps must be positive, got " << rms_norm_eps;
  rope.validate("rope_parameters");
  HSPMD_CHECK(max_position_embeddings > 0) << "max_position_embeddings must be positive";
  HSPMD_CHECK(weights_dtype == "float32" || weights_dtype == "bfloat16" || weights_dtype == "float64")
      << "dtype \"" << weights_dtype << "\" is not a weight dtype hspmd reads (float32, bfloat16, float64)";
}

int64_t LlamaConfig::num_parameters() const {
  int64_t n = 0;
  for (const LlamaParam& p : llama_parameters(*this)) n += p.shape.numel();
  return n;
}

namespace {

// Keys a Hugging Face config may carry that do not change what the model computes in training or
// evaluation: token ids, generation settings, bookkeeping. Accepted and not used.
const std::set<std::string>& keys_without_effect() {
  static const std::set<std::string> keys{
      // bookkeeping
      "_name_or_path", "transformers_version", "_attn_implementation_autoset", "attn_implementation",
      "output_attentions", "output_hidden_states", "return_dict", "torchscript", "use_cache",
      "tokenizer_class", "prefix", "task_specific_params", "finetuning_task", "id2label", "label2id",
      "num_labels", "problem_type", "chunk_size_feed_forward", "tf_legacy_loss", "use_bfloat16",
      // token ids
      "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
      // generation settings (inference only)
      "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
      "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
      "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
      "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
      "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
      "suppress_tokens", "begin_suppress_tokens",
      // initialization of a model trained from scratch (hspmd has its own --init-std); weights
      // loaded from a checkpoint are unaffected
      "initializer_range",
      // transformers < 4.36 computed the projections in `pretraining_tp` slices: the same sums,
      // added in another order
      "pretraining_tp"};
  return keys;
}

// Keys hspmd reads (or checks) below.
const std::set<std::string>& keys_read() {
  static const std::set<std::string> keys{
      "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
      "vocab_size", "head_dim", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters",
      "max_position_embeddings", "tie_word_embeddings", "torch_dtype", "dtype", "model_type", "architectures",
      "hidden_act", "attention_bias", "mlp_bias", "attention_dropout", "is_decoder", "is_encoder_decoder",
      "add_cross_attention", "tie_encoder_decoder", "pruned_heads"};
  return keys;
}

// Error unless key is absent, null or `expected` (the value under which hspmd computes the model).
void expect_value(const nlohmann::json& j, const char* key, const nlohmann::json& expected, const std::string& why,
                  const std::string& source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  const bool same = it->is_number() && expected.is_number() ? it->get<double>() == expected.get<double>()
                                                            : *it == expected;
  HSPMD_CHECK(same) << source << ": \"" << key << "\" is " << it->dump() << ", which hspmd does not compute ("
                    << why << "; supported: " << expected.dump() << ")";
}

}  // namespace

LlamaConfig LlamaConfig::from_json_text(const std::string& text, const std::string& source) {
  nlohmann::json j = parse_json_object(text, source);
  // What the checkpoint is, first: only the Llama causal LM computes what build_llama() builds,
  // and another architecture's own keys are better explained by its name than as unknown keys.
  expect_value(j, "model_type", "llama", "another architecture", source);
  std::vector<std::string> unknown;
  for (const auto& [key, value] : j.items()) {
    if (!keys_read().count(key) && !keys_without_effect().count(key)) unknown.push_back("\"" + key + "\"");
  }
  if (!unknown.empty()) {
    std::string list;
    for (const std::string& k : unknown) list += (list.empty() ? "" : ", ") + k;
    HSPMD_THROW() << source << ": unknown key" << (unknown.size() > 1 ? "s " : " ") << list
                  << ": hspmd cannot tell whether " << (unknown.size() > 1 ? "they change" : "it changes")
                  << " the model, so it refuses the config (docs/model-config.md lists the keys it reads)";
  }
  if (j.contains("architectures") && !j.at("architectures").is_null()) {
    expect_value(j, "architectures", nlohmann::json::array({"LlamaForCausalLM"}), "another model head", source);
  }
  if (j.contains("hidden_act") && j.at("hidden_act") == "swish") j.erase("hidden_act");  // swish is silu
  expect_value(j, "hidden_act", "silu", "the MLP is silu(gate) * up", source);
  expect_value(j, "attention_dropout", 0.0, "training would drop attention weights", source);
  expect_value(j, "is_decoder", false, "a decoder of an encoder-decoder model", source);
  expect_value(j, "is_encoder_decoder", false, "an encoder-decoder model", source);
  expect_value(j, "add_cross_attention", false, "cross-attention layers", source);
  expect_value(j, "tie_encoder_decoder", false, "an encoder-decoder model", source);
  expect_value(j, "pruned_heads", nlohmann::json::object(), "pruned attention heads", source);

  LlamaConfig c;
  read_key(j, "hidden_size", c.hidden_size, true, source);
  read_key(j, "intermediate_size", c.intermediate_size, true, source);
  read_key(j, "num_hidden_layers", c.num_hidden_layers, true, source);
  read_key(j, "num_attention_heads", c.num_attention_heads, true, source);
  c.num_key_value_heads = c.num_attention_heads;  // Hugging Face default: multi-head attention
  read_key(j, "num_key_value_heads", c.num_key_value_heads, false, source);
  read_key(j, "vocab_size", c.vocab_size, true, source);
  read_key(j, "head_dim", c.explicit_head_dim, false, source);
  read_key(j, "rms_norm_eps", c.rms_norm_eps, false, source);
  c.rope = RopeParameters::from_config(j, source);
  read_key(j, "max_position_embeddings", c.max_position_embeddings, false, source);
  read_key(j, "tie_word_embeddings", c.tie_word_embeddings, false, source);
  read_key(j, "attention_bias", c.attention_bias, false, source);
  read_key(j, "mlp_bias", c.mlp_bias, false, source);
  // transformers >= 5 writes "dtype", older versions "torch_dtype"; "auto" leaves the file's dtype.
  std::string torch_dtype, dtype;
  read_key(j, "torch_dtype", torch_dtype, false, source);
  read_key(j, "dtype", dtype, false, source);
  HSPMD_CHECK(torch_dtype.empty() || dtype.empty() || torch_dtype == dtype)
      << source << ": \"torch_dtype\" is \"" << torch_dtype << "\" but \"dtype\" is \"" << dtype
      << "\"; they must agree";
  const std::string& stored = dtype.empty() ? torch_dtype : dtype;
  if (!stored.empty() && stored != "auto") c.weights_dtype = stored;
  HSPMD_CHECK(c.weights_dtype != "float16")
      << source << ": \"" << (dtype.empty() ? "torch_dtype" : "dtype")
      << "\" is \"float16\": hspmd does not read float16 weights (supported: float32, bfloat16, float64)";
  // A head wider or narrower than hidden/heads is fine; saying the quotient itself is too.
  if (c.explicit_head_dim > 0 && c.num_attention_heads > 0 &&
      c.explicit_head_dim * c.num_attention_heads == c.hidden_size) {
    c.explicit_head_dim = 0;
  }
  try {
    c.validate();
  } catch (const Error& e) {
    HSPMD_THROW() << source << ": " << e.what();
  }
  return c;
}

LlamaConfig LlamaConfig::from_file(const std::string& path) {
  const std::string file = std::filesystem::is_directory(path) ? (std::filesystem::path(path) / "config.json").string()
                                                               : path;
  return from_json_text(read_text_file(file, "model config"), file);
}

std::string LlamaConfig::to_json_text() const {
  nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}},
                      {"model_type", "llama"},
                      {"hidden_size", hidden_size},
                      {"intermediate_size", intermediate_size},
                      {"num_hidden_layers", num_hidden_layers},
                      {"num_attention_heads", num_attention_heads},
                      {"num_key_value_heads", num_key_value_heads},
                      {"head_dim", head_dim()},
                      {"vocab_size", vocab_size},
                      {"hidden_act", "silu"},
                      {"rms_norm_eps", rms_norm_eps},
                      {"rope_parameters", rope.to_json()},
                      {"max_position_embeddings", max_position_embeddings},
                      {"tie_word_embeddings", tie_word_embeddings},
                      {"attention_bias", attention_bias},
                      {"mlp_bias", mlp_bias},
                      {"dtype", weights_dtype}};
  return j.dump(2);
}

std::vector<LlamaParam> llama_parameters(const LlamaConfig& c) {
  const int64_t H = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int64_t q_out = c.num_attention_heads * c.head_dim(), kv_out = c.num_key_value_heads * c.head_dim();
  std::vector<LlamaParam> params;
  params.push_back({"model.embed_tokens.weight", Shape{V, H}, LlamaParamRole::kEmbedding, -1});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    // A projection's weight [out, in], then (with `bias`) its bias [out].
    auto proj = [&](const std::string& name, int64_t out, int64_t in, LlamaParamRole role, bool bias,
                    LlamaParamRole bias_role) {
      params.push_back({p + name + ".weight", Shape{out, in}, role, l});
      if (bias) params.push_back({p + name + ".bias", Shape{out}, bias_role, l});
    };
    const bool ab = c.attention_bias, mb = c.mlp_bias;
    using R = LlamaParamRole;
    params.push_back({p + "input_layernorm.weight", Shape{H}, R::kNorm, l});
    proj("self_attn.q_proj", q_out, H, R::kQProj, ab, R::kQBias);
    proj("self_attn.k_proj", kv_out, H, R::kKProj, ab, R::kKBias);
    proj("self_attn.v_proj", kv_out, H, R::kVProj, ab, R::kVBias);
    proj("self_attn.o_proj", H, q_out, R::kOProj, ab, R::kOBias);
    params.push_back({p + "post_attention_layernorm.weight", Shape{H}, R::kNorm, l});
    proj("mlp.gate_proj", F, H, R::kGateProj, mb, R::kGateBias);
    proj("mlp.up_proj", F, H, R::kUpProj, mb, R::kUpBias);
    proj("mlp.down_proj", H, F, R::kDownProj, mb, R::kDownBias);
  }
  params.push_back({"model.norm.weight", Shape{H}, LlamaParamRole::kNorm, -1});
  if (!c.tie_word_embeddings) params.push_back({"lm_head.weight", Shape{V, H}, LlamaParamRole::kLmHead, -1});
  return params;
}

}  // namespace hspmd::models
