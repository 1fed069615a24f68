#include "hspmd/models/gemma3_config.h"

#include <set>
#include <string>

#include "hspmd/models/decoder_config_keys.h"

namespace hspmd::models {

namespace {

constexpr double kGlobalTheta = 1'000'000.0, kLocalTheta = 10'000.0;  // transformers' defaults

// The global (full-attention) and local (sliding) RoPE, from either config generation.
void read_ropes(const ConfigReader& r, LlamaConfig& c) {
  RopeParameters local{.theta = kLocalTheta};
  if (!r.has("rope_parameters")) {  // transformers < 5
    nlohmann::json legacy = {{"rope_theta", kGlobalTheta}};
    if (r.has("rope_theta")) legacy["rope_theta"] = r.json().at("rope_theta");
    if (r.has("rope_scaling")) legacy["rope_scaling"] = r.json().at("rope_scaling");
    c.rope = RopeParameters::from_config(legacy, r.source());
    r.read("rope_local_base_freq", local.theta);
    local.validate("rope_local_base_freq");
    c.decoder.sliding_rope = local;
    return;
  }
  for (const char* key : {"rope_theta", "rope_scaling", "rope_local_base_freq"}) {
    HSPMD_CHECK(!r.has(key)) << r.source() << ": both \"rope_parameters\" and \"" << key
                             << "\" say how RoPE is computed; keep one of them";
  }
  const nlohmann::json& ropes = r.json().at("rope_parameters");
  HSPMD_CHECK(ropes.is_object()) << r.source() << ": \"rope_parameters\" must be an object, got " << ropes.type_name();
  for (const auto& [type, value] : ropes.items()) {
    HSPMD_CHECK(type == "full_attention" || type == "sliding_attention")
        << r.source() << ": \"rope_parameters\" of Gemma 3 holds one RoPE per layer type (\"full_attention\", "
        << "\"sliding_attention\"), not \"" << type << "\"";
  }
  c.rope = ropes.contains("full_attention") && !ropes.at("full_attention").is_null()
               ? RopeParameters::from_object(ropes.at("full_attention"), "rope_parameters.full_attention",
                                             kGlobalTheta, r.source())
               : RopeParameters{.theta = kGlobalTheta};
  if (ropes.contains("sliding_attention") && !ropes.at("sliding_attention").is_null()) {
    local = RopeParameters::from_object(ropes.at("sliding_attention"), "rope_parameters.sliding_attention",
                                        kLocalTheta, r.source());
  }
  c.decoder.sliding_rope = local;
}

}  // namespace

LlamaConfig read_gemma3_config(const ConfigReader& r) {
  std::set<std::string> keys = shared_decoder_keys();
  keys.insert({"hidden_activation", "attention_bias", "query_pre_attn_scalar", "sliding_window", "layer_types",
               "sliding_window_pattern", "rope_parameters", "rope_theta", "rope_scaling", "rope_local_base_freq",
               "final_logit_softcapping", "attn_logit_softcapping", "use_bidirectional_attention",
               // what transformers writes of the pattern it derived layer_types from: layer_types
               // is what it computes
               "_sliding_window_pattern",
               // the KV cache of generation
               "cache_implementation"});
  r.refuse_unknown(keys);
  r.expect("hidden_activation", "gelu_pytorch_tanh", "the MLP is gelu_tanh(gate) * up");
  r.expect("attn_logit_softcapping", nullptr, "soft-capped attention logits, which hspmd does not compute");
  r.expect("use_bidirectional_attention", false, "bidirectional attention");

  LlamaConfig c;  // transformers' defaults for the keys a config may leave out
  c.explicit_head_dim = 256;
  c.rms_norm_eps = 1e-6;
  c.max_position_embeddings = 131'072;
  c.tie_word_embeddings = true;
  c.pad_token_id = 0;
  read_shared_decoder_keys(r, "Gemma3ForCausalLM", c);
  if (c.explicit_head_dim * c.num_attention_heads == c.hidden_size) c.explicit_head_dim = 0;  // the quotient
  r.read("attention_bias", c.attention_bias);
  read_ropes(r, c);

  DecoderOptions& d = c.decoder;
  d.qk_norm = true;
  d.norm_weight_offset = 1.0;
  d.sandwich_norms = true;
  d.activation = MlpActivation::kGeluTanh;
  d.scale_embeddings = true;
  int64_t query_pre_attn_scalar = 256;  // an integer in transformers (its config refuses 24.0)
  r.read("query_pre_attn_scalar", query_pre_attn_scalar);
  HSPMD_CHECK(query_pre_attn_scalar > 0) << r.source() << ": \"query_pre_attn_scalar\" must be positive, got "
                                         << query_pre_attn_scalar;
  d.query_pre_attn_scalar = static_cast<double>(query_pre_attn_scalar);
  r.read("final_logit_softcapping", d.final_logit_softcap);
  d.sliding_window = r.json().contains("sliding_window") ? 0 : 4096;  // null: no window
  r.read("sliding_window", d.sliding_window);
  d.sliding_layers = read_sliding_layers(r, c.num_hidden_layers);
  if (!r.has("layer_types")) {  // every pattern-th layer global, the others local
    int64_t pattern = 6;
    r.read("sliding_window_pattern", pattern);
    HSPMD_CHECK(pattern > 0) << r.source() << ": \"sliding_window_pattern\" must be positive, got " << pattern;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) d.sliding_layers.push_back((l + 1) % pattern != 0);
  }
  return c;
}

void refuse_gemma3_multimodal(const ConfigReader& r) {
  // Why refused rather than read: its weights are named language_model.model.* and export would
  // have to write the vision tower back; the text model saved alone is exactly what hspmd trains.
  HSPMD_THROW() << r.source() << ": \"model_type\" \"gemma3\" is Gemma3ForConditionalGeneration, a text model ("
                << (r.has("text_config") ? "\"text_config\"" : "\"text_config\", absent here")
                << ") with a vision tower (\"vision_config\"); hspmd trains the text-only Gemma3ForCausalLM "
                   "(\"model_type\": \"gemma3_text\"): save its language model as one (Gemma3ForCausalLM(config."
                   "text_config) given model.language_model's weights, then save_pretrained) and give that directory";
}

nlohmann::json gemma3_config_json(const LlamaConfig& c) {
  const DecoderOptions& d = c.decoder;
  nlohmann::json j = shared_decoder_json(c, "Gemma3ForCausalLM");
  j["hidden_activation"] = "gelu_pytorch_tanh";
  if (c.pad_token_id < 0) j["pad_token_id"] = nullptr;  // absent would mean Gemma's default, 0
  j["attention_bias"] = c.attention_bias;
  j["query_pre_attn_scalar"] = static_cast<int64_t>(d.query_pre_attn_scalar);
  j["sliding_window"] = d.sliding_window > 0 ? nlohmann::json(d.sliding_window) : nlohmann::json();
  j["layer_types"] = d.layer_types(c.num_hidden_layers);
  j["rope_parameters"] = {{"full_attention", c.rope.to_json()},
                          {"sliding_attention", d.sliding_rope.value_or(c.rope).to_json()}};
  j["final_logit_softcapping"] = d.final_logit_softcap > 0 ? nlohmann::json(d.final_logit_softcap) : nlohmann::json();
  j["attn_logit_softcapping"] = nullptr;
  j["use_bidirectional_attention"] = false;
  return j;
}

}  // namespace hspmd::models
