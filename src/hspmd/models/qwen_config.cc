#include "hspmd/models/qwen_config.h"

#include <set>
#include <string>

#include "hspmd/models/decoder_config_keys.h"

namespace hspmd::models {

namespace {

// Reads the keys Qwen2 and Qwen3 share besides shared_decoder_keys(); `architecture` is the
// family's transformers class.
LlamaConfig read_qwen(const ConfigReader& r, const std::string& architecture, std::set<std::string> own_keys) {
  std::set<std::string> keys = shared_decoder_keys();
  keys.insert({"hidden_act", "rope_theta", "rope_scaling", "rope_parameters", "use_sliding_window", "sliding_window",
               "max_window_layers", "layer_types"});
  keys.insert(own_keys.begin(), own_keys.end());
  r.refuse_unknown(keys);
  LlamaConfig c;  // transformers' defaults for the keys a config may leave out
  c.rms_norm_eps = 1e-6;
  c.max_position_embeddings = 32768;
  read_shared_decoder_keys(r, architecture, c);
  expect_silu(r);
  c.rope = RopeParameters::from_config(r.json(), r.source());

  // transformers sets sliding_window to None unless use_sliding_window, then derives layer_types
  // (when the config has none) from it; a layer marked sliding without a window is refused by
  // DecoderOptions::validate, as transformers cannot build its mask either.
  bool use_sliding_window = false;
  r.read("use_sliding_window", use_sliding_window);
  int64_t window = 0, max_window_layers = 28;
  if (use_sliding_window) r.read("sliding_window", window);
  r.read("max_window_layers", max_window_layers);
  std::vector<bool> sliding = read_sliding_layers(r, c.num_hidden_layers);
  if (!r.has("layer_types") && window > 0) {
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) sliding.push_back(l >= max_window_layers);
  }
  // One spelling of "no layer slides", so that equal models have equal configs.
  bool any = false;
  for (bool s : sliding) any = any || s;
  c.decoder.sliding_window = any ? window : 0;
  if (any) c.decoder.sliding_layers = sliding;
  return c;
}

}  // namespace

LlamaConfig read_qwen2_config(const ConfigReader& r) {
  LlamaConfig c = read_qwen(r, "Qwen2ForCausalLM", {});
  c.attention_bias = true;  // q/k/v only
  c.decoder.o_proj_bias = false;
  return c;
}

LlamaConfig read_qwen3_config(const ConfigReader& r) {
  LlamaConfig c = read_qwen(r, "Qwen3ForCausalLM", {"attention_bias"});
  // Without "head_dim" a Qwen3 head is 128 wide, not hidden / heads.
  if (!r.has("head_dim") && c.num_attention_heads * 128 != c.hidden_size) c.explicit_head_dim = 128;
  r.read("attention_bias", c.attention_bias);
  c.decoder.qk_norm = true;
  return c;
}

nlohmann::json qwen_config_json(const LlamaConfig& c) {
  const bool qwen3 = c.decoder.model_type == "qwen3";
  nlohmann::json j = shared_decoder_json(c, qwen3 ? "Qwen3ForCausalLM" : "Qwen2ForCausalLM");
  j["hidden_act"] = "silu";
  j["rope_parameters"] = c.rope.to_json();
  if (qwen3) j["attention_bias"] = c.attention_bias;
  j["use_sliding_window"] = c.decoder.sliding_window > 0;
  j["sliding_window"] = c.decoder.sliding_window > 0 ? nlohmann::json(c.decoder.sliding_window) : nlohmann::json();
  j["layer_types"] = c.decoder.layer_types(c.num_hidden_layers);
  return j;
}

}  // namespace hspmd::models
