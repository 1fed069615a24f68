#include "hspmd/models/decoder_families.h"

#include "hspmd/models/gemma3_config.h"
#include "hspmd/models/mistral_config.h"
#include "hspmd/models/qwen_config.h"

namespace hspmd::models {

const std::vector<DecoderFamily>& decoder_families() {
  static const std::vector<DecoderFamily> families{
      {"llama", read_llama_config, llama_config_json},
      {"qwen2", read_qwen2_config, qwen_config_json},
      {"qwen3", read_qwen3_config, qwen_config_json},
      {"mistral", read_mistral_config, mistral_config_json},
      {"gemma3_text", read_gemma3_config, gemma3_config_json},
  };
  return families;
}

const DecoderFamily* find_decoder_family(std::string_view model_type) {
  for (const DecoderFamily& f : decoder_families()) {
    if (f.model_type == model_type) return &f;
  }
  return nullptr;
}

std::string known_decoder_model_types() {
  std::string out;
  for (const DecoderFamily& f : decoder_families()) {
    out += (out.empty() ? "\"" : ", \"") + std::string(f.model_type) + "\"";
  }
  return out;
}

}  // namespace hspmd::models
