#include "hspmd/models/llama_config.h"

#include <cstdint>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "hspmd/core/error.h"
#include "hspmd/core/json_file.h"
#include "hspmd/models/config_reader.h"
#include "hspmd/models/decoder_config_keys.h"
#include "hspmd/models/decoder_families.h"
#include "hspmd/models/gemma3_config.h"

namespace hspmd::models {

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
  decoder.validate(num_hidden_layers);
  // Element counts are int64 products of these sizes: refuse a config whose parameters could not be
  // counted before anything multiplies them (fuzzing found vocab_size 5e18). Doubles cannot overflow.
  const double h = static_cast<double>(hidden_size), d = static_cast<double>(head_dim());
  const double attention = (2.0 * static_cast<double>(num_attention_heads) + 2.0 * static_cast<double>(num_key_value_heads)) * d * h;
  const double layer = attention + 3.0 * static_cast<double>(intermediate_size) * h + 4.0 * h + 2.0 * d;
  const double total = static_cast<double>(num_hidden_layers) * layer + 2.0 * static_cast<double>(vocab_size) * h + h;
  HSPMD_CHECK(total < 0x1p62) << "the model's sizes (hidden_size " << hidden_size << ", intermediate_size "
                              << intermediate_size << ", vocab_size " << vocab_size << ", num_hidden_layers "
                              << num_hidden_layers << ") give more than 2^62 parameters";
}

int64_t LlamaConfig::num_parameters() const {
  int64_t n = 0;
  for (const LlamaParam& p : llama_parameters(*this)) n += p.shape.numel();
  return n;
}

namespace {

// The keys of a Llama config besides the shared ones (models/decoder_config_keys.h).
const std::set<std::string>& llama_keys() {
  static const std::set<std::string> keys{
      "rope_theta", "rope_scaling", "rope_parameters", "hidden_act", "attention_bias", "mlp_bias",
      // transformers < 4.36 computed the projections in `pretraining_tp` slices: the same sums,
      // added in another order
      "pretraining_tp"};
  return keys;
}

}  // namespace

LlamaConfig read_llama_config(const ConfigReader& r) {
  std::set<std::string> keys = shared_decoder_keys();
  keys.insert(llama_keys().begin(), llama_keys().end());
  r.refuse_unknown(keys);
  LlamaConfig c;
  read_shared_decoder_keys(r, "LlamaForCausalLM", c);
  expect_silu(r);
  c.rope = RopeParameters::from_config(r.json(), r.source());
  r.read("attention_bias", c.attention_bias);
  r.read("mlp_bias", c.mlp_bias);
  return c;
}

nlohmann::json llama_config_json(const LlamaConfig& c) {
  nlohmann::json j = shared_decoder_json(c, "LlamaForCausalLM");
  j["hidden_act"] = "silu";
  j["rope_parameters"] = c.rope.to_json();
  j["attention_bias"] = c.attention_bias;
  j["mlp_bias"] = c.mlp_bias;
  return j;
}

LlamaConfig LlamaConfig::from_json_text(const std::string& text, const std::string& source) {
  const ConfigReader r(parse_json_object(text, source), source);
  // What the checkpoint is, first: another architecture's own keys are better explained by its
  // name than as unknown keys.
  std::string model_type = "llama";
  r.read("model_type", model_type);
  if (model_type == "gemma3") refuse_gemma3_multimodal(r);
  const DecoderFamily* family = find_decoder_family(model_type);
  HSPMD_CHECK(family) << source << ": \"model_type\" is \"" << model_type
                      << "\", which hspmd does not build (known: " << known_decoder_model_types() << ")";
  LlamaConfig c = family->from_config(r);
  c.decoder.model_type = std::string(family->model_type);
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
  const DecoderFamily* family = find_decoder_family(decoder.model_type);
  HSPMD_CHECK(family) << "no decoder family has model_type \"" << decoder.model_type << "\"";
  return family->to_config(*this).dump(2);
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
    auto norm = [&](const std::string& name, int64_t width, LlamaParamRole role) {
      params.push_back({p + name + ".weight", Shape{width}, role, l});
    };
    norm("input_layernorm", H, R::kNorm);
    proj("self_attn.q_proj", q_out, H, R::kQProj, ab, R::kQBias);
    proj("self_attn.k_proj", kv_out, H, R::kKProj, ab, R::kKBias);
    proj("self_attn.v_proj", kv_out, H, R::kVProj, ab, R::kVBias);
    proj("self_attn.o_proj", H, q_out, R::kOProj, ab && c.decoder.o_proj_bias, R::kOBias);
    if (c.decoder.qk_norm) {
      norm("self_attn.q_norm", c.head_dim(), R::kHeadNorm);
      norm("self_attn.k_norm", c.head_dim(), R::kHeadNorm);
    }
    norm("post_attention_layernorm", H, R::kNorm);
    if (c.decoder.sandwich_norms) norm("pre_feedforward_layernorm", H, R::kNorm);
    proj("mlp.gate_proj", F, H, R::kGateProj, mb, R::kGateBias);
    proj("mlp.up_proj", F, H, R::kUpProj, mb, R::kUpBias);
    proj("mlp.down_proj", H, F, R::kDownProj, mb, R::kDownBias);
    if (c.decoder.sandwich_norms) norm("post_feedforward_layernorm", H, R::kNorm);
  }
  params.push_back({"model.norm.weight", Shape{H}, LlamaParamRole::kNorm, -1});
  if (!c.tie_word_embeddings) params.push_back({"lm_head.weight", Shape{V, H}, LlamaParamRole::kLmHead, -1});
  return params;
}

}  // namespace hspmd::models
