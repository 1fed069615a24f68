#include "hspmd/models/mistral_config.h"

#include <set>
#include <string>

#include "hspmd/models/decoder_config_keys.h"

namespace hspmd::models {

LlamaConfig read_mistral_config(const ConfigReader& r) {
  std::set<std::string> keys = shared_decoder_keys();
  // transformers' MistralModel ignores "layer_types" (it warns and slides every layer), so it has no
  // effect here either.
  keys.insert({"hidden_act", "rope_theta", "rope_scaling", "rope_parameters", "sliding_window", "layer_types"});
  r.refuse_unknown(keys);
  LlamaConfig c;  // transformers' defaults for the keys a config may leave out
  c.rms_norm_eps = 1e-6;
  c.max_position_embeddings = 4096 * 32;
  read_shared_decoder_keys(r, "MistralForCausalLM", c);
  expect_silu(r);
  c.rope = RopeParameters::from_config(r.json(), r.source());
  int64_t window = r.json().contains("sliding_window") ? 0 : 4096;  // null: no window
  r.read("sliding_window", window);
  HSPMD_CHECK(!r.has("sliding_window") || window > 0)
      << r.source() << ": \"sliding_window\" must be positive or null, got " << window;
  c.decoder.sliding_window = window;
  if (window > 0) c.decoder.sliding_layers.assign(static_cast<size_t>(c.num_hidden_layers), true);
  return c;
}

nlohmann::json mistral_config_json(const LlamaConfig& c) {
  nlohmann::json j = shared_decoder_json(c, "MistralForCausalLM");
  j["hidden_act"] = "silu";
  j["rope_parameters"] = c.rope.to_json();
  j["sliding_window"] = c.decoder.sliding_window > 0 ? nlohmann::json(c.decoder.sliding_window) : nlohmann::json();
  return j;
}

}  // namespace hspmd::models
