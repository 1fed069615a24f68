#include "hspmd/models/llama_config.h"

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
  HSPMD_CHECK(num_attention_heads > 0 && hidden_size % num_attention_heads == 0)
      << "num_attention_heads " << num_attention_heads << " must divide hidden_size " << hidden_size;
  HSPMD_CHECK(head_dim() % 2 == 0) << "head dim " << head_dim() << " must be even for rotary embeddings";
  HSPMD_CHECK(num_key_value_heads > 0 && num_attention_heads % num_key_value_heads == 0)
      << "num_key_value_heads " << num_key_value_heads << " must divide num_attention_heads "
      << num_attention_heads;
  HSPMD_CHECK(vocab_size > 0) << "vocab_size must be positive, got " << vocab_size;
  HSPMD_CHECK(rms_norm_eps > 0) << "rms_norm_eps must be positive, got " << rms_norm_eps;
  HSPMD_CHECK(rope_theta > 0) << "rope_theta must be positive, got " << rope_theta;
  HSPMD_CHECK(max_position_embeddings > 0) << "max_position_embeddings must be positive";
}

int64_t LlamaConfig::num_parameters() const {
  int64_t n = 0;
  for (const LlamaParam& p : llama_parameters(*this)) n += p.shape.numel();
  return n;
}

LlamaConfig LlamaConfig::from_json_text(const std::string& text, const std::string& source) {
  nlohmann::json j = parse_json_object(text, source);
  LlamaConfig c;
  read_key(j, "hidden_size", c.hidden_size, true, source);
  read_key(j, "intermediate_size", c.intermediate_size, true, source);
  read_key(j, "num_hidden_layers", c.num_hidden_layers, true, source);
  read_key(j, "num_attention_heads", c.num_attention_heads, true, source);
  c.num_key_value_heads = c.num_attention_heads;  // Hugging Face default: multi-head attention
  read_key(j, "num_key_value_heads", c.num_key_value_heads, false, source);
  read_key(j, "vocab_size", c.vocab_size, true, source);
  read_key(j, "rms_norm_eps", c.rms_norm_eps, false, source);
  read_key(j, "rope_theta", c.rope_theta, false, source);
  read_key(j, "max_position_embeddings", c.max_position_embeddings, false, source);
  read_key(j, "tie_word_embeddings", c.tie_word_embeddings, false, source);
  try {
    c.validate();
  } catch (const Error& e) {
    HSPMD_THROW() << source << ": " << e.what();
  }
  return c;
}

LlamaConfig LlamaConfig::from_file(const std::string& path) {
  return from_json_text(read_text_file(path, "model config"), path);
}

std::string LlamaConfig::to_json_text() const {
  nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}},
                      {"model_type", "llama"},
                      {"hidden_size", hidden_size},
                      {"intermediate_size", intermediate_size},
                      {"num_hidden_layers", num_hidden_layers},
                      {"num_attention_heads", num_attention_heads},
                      {"num_key_value_heads", num_key_value_heads},
                      {"vocab_size", vocab_size},
                      {"rms_norm_eps", rms_norm_eps},
                      {"rope_theta", rope_theta},
                      {"max_position_embeddings", max_position_embeddings},
                      {"tie_word_embeddings", tie_word_embeddings}};
  return j.dump(2);
}

std::vector<LlamaParam> llama_parameters(const LlamaConfig& c) {
  const int64_t H = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int64_t q_out = c.num_attention_heads * c.head_dim(), kv_out = c.num_key_value_heads * c.head_dim();
  std::vector<LlamaParam> params;
  params.push_back({"model.embed_tokens.weight", Shape{V, H}, LlamaParamRole::kEmbedding, -1});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    params.push_back({p + "input_layernorm.weight", Shape{H}, LlamaParamRole::kNorm, l});
    params.push_back({p + "self_attn.q_proj.weight", Shape{q_out, H}, LlamaParamRole::kQProj, l});
    params.push_back({p + "self_attn.k_proj.weight", Shape{kv_out, H}, LlamaParamRole::kKProj, l});
    params.push_back({p + "self_attn.v_proj.weight", Shape{kv_out, H}, LlamaParamRole::kVProj, l});
    params.push_back({p + "self_attn.o_proj.weight", Shape{H, q_out}, LlamaParamRole::kOProj, l});
    params.push_back({p + "post_attention_layernorm.weight", Shape{H}, LlamaParamRole::kNorm, l});
    params.push_back({p + "mlp.gate_proj.weight", Shape{F, H}, LlamaParamRole::kGateProj, l});
    params.push_back({p + "mlp.up_proj.weight", Shape{F, H}, LlamaParamRole::kUpProj, l});
    params.push_back({p + "mlp.down_proj.weight", Shape{H, F}, LlamaParamRole::kDownProj, l});
  }
  params.push_back({"model.norm.weight", Shape{H}, LlamaParamRole::kNorm, -1});
  if (!c.tie_word_embeddings) params.push_back({"lm_head.weight", Shape{V, H}, LlamaParamRole::kLmHead, -1});
  return params;
}

}  // namespace hspmd::models
