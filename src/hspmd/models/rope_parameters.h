// Rotary position embedding settings of a Hugging Face config.json, in either generation:
//
//   transformers < 5:  "rope_theta": 500000.0,
//                      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
//                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
//   transformers >= 5: "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, ...}
//
// When both generations are present they must describe the same RoPE, else an error names both
// keys. Supported types (the others, e.g. "dynamic", "longrope", are refused naming the key and
// the value, since each changes the frequencies in a way we do not compute):
//   default  inv_freq[i] = theta^(-2i/D)
//   linear   inv_freq[i] / factor
//   llama3   Llama 3.1's wavelength-banded scaling: long wavelengths divided by factor, short ones
//            kept, a smooth blend between (low/high_freq_factor, original_max_position_embeddings)
//   yarn     YaRN: a linear ramp between interpolated (/ factor) and original frequencies over the
//            pairs between the beta_fast and beta_slow rotation counts, and cos/sin scaled by
//            attention_factor() (which the model applies as attention_factor^2 on the logits)
// inverse_frequencies() computes them the way transformers does, in float32 (the model was trained
// with those float32 buffers), so a checkpoint evaluates as the model it is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hspmd::models {

enum class RopeType { kDefault, kLinear, kLlama3, kYarn };

struct RopeParameters {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  double factor = 1.0;                           // linear, llama3
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  int64_t original_max_position_embeddings = 0;  // llama3, yarn: context length before scaling
  double beta_fast = 32.0;                       // yarn: rotation counts bounding the ramp
  double beta_slow = 1.0;
  bool truncate = true;                          // yarn: round the ramp's ends to whole pairs
  double attention_factor = 0.0;                 // yarn: cos/sin scale (0: from factor and mscale)
  double mscale = 0.0;                           // yarn: 0 = unset
  double mscale_all_dim = 0.0;                   // yarn: 0 = unset

  // How much cos and sin are scaled (yarn; 1 for the other types). Scaling both rotated q and k
  // by it scales every attention logit by its square.
  double cos_sin_scale() const;
  // "default", "linear", "llama3", "yarn".
  std::string type_name() const;
  // Error naming `key` (e.g. "rope_parameters.factor") when a value is out of range.
  void validate(const std::string& key) const;
  // The D/2 inverse frequencies of a head of dimension head_dim (even).
  std::vector<double> inverse_frequencies(int64_t head_dim) const;
  // The transformers >= 5 "rope_parameters" object (only the keys of this type).
  nlohmann::json to_json() const;
  // One line for humans: "llama3 (theta 500000, factor 8, low_freq_factor 1, ...)".
  std::string to_string() const;

  // Reads the RoPE of a whole config object (both generations; see above). `source` names the
  // file in errors. Defaults (theta 10000, type default) when neither generation is present.
  static RopeParameters from_config(const nlohmann::json& config, const std::string& source);
  // One transformers >= 5 RoPE object found under `key` (e.g. "rope_parameters.full_attention" of
  // a config with a RoPE per layer type); theta is `default_theta` unless it says "rope_theta".
  static RopeParameters from_object(const nlohmann::json& object, const std::string& key, double default_theta,
                                    const std::string& source);

  friend bool operator==(const RopeParameters&, const RopeParameters&) = default;
};

}  // namespace hspmd::models
