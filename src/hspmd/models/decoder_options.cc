#include "hspmd/models/decoder_options.h"

#include "hspmd/core/error.h"

namespace hspmd::models {

std::vector<std::string> DecoderOptions::layer_types(int64_t layers) const {
  std::vector<std::string> out;
  for (int l = 0; l < layers; ++l) out.push_back(is_sliding(l) ? "sliding_attention" : "full_attention");
  return out;
}

DecoderOptions DecoderOptions::with_layers(int64_t layers) const {
  DecoderOptions o = *this;
  if (sliding_layers.empty()) return o;
  o.sliding_layers.resize(static_cast<size_t>(layers));
  for (size_t l = 0; l < o.sliding_layers.size(); ++l) o.sliding_layers[l] = sliding_layers[l % sliding_layers.size()];
  return o;
}

void DecoderOptions::validate(int64_t layers) const {
  HSPMD_CHECK(norm_weight_offset == 0.0 || norm_weight_offset == 1.0)
      << "norm weight offset must be 0 or 1, got " << norm_weight_offset;
  HSPMD_CHECK(query_pre_attn_scalar >= 0) << "query_pre_attn_scalar must be positive, got " << query_pre_attn_scalar;
  HSPMD_CHECK(final_logit_softcap >= 0) << "final_logit_softcapping must be positive, got " << final_logit_softcap;
  HSPMD_CHECK(sliding_window >= 0) << "sliding_window must be positive, got " << sliding_window;
  HSPMD_CHECK(sliding_layers.empty() || static_cast<int64_t>(sliding_layers.size()) == layers)
      << "layer_types has " << sliding_layers.size() << " entries for " << layers << " layers (num_hidden_layers)";
  bool any_sliding = false;
  for (bool s : sliding_layers) any_sliding = any_sliding || s;
  HSPMD_CHECK(!any_sliding || sliding_window > 0)
      << "layer_types names sliding_attention layers but the config sets no sliding_window";
  if (sliding_rope) sliding_rope->validate("rope_parameters.sliding_attention");
}

}  // namespace hspmd::models
