// The decoder families hspmd builds as the Llama graph with options (models/decoder_options.h), by
// the "model_type" of their config.json. Each family has its own parser and writer of config.json
// (models/<family>_config.h): what keys transformers 5.x writes for it, what each means here, and
// which values are refused.
//
//   model_type    transformers class            parser / writer
//   llama         LlamaForCausalLM              models/llama_config.h
//   qwen2         Qwen2ForCausalLM              models/qwen_config.h
//   qwen3         Qwen3ForCausalLM              models/qwen_config.h
//   mistral       MistralForCausalLM            models/mistral_config.h
//   gemma3_text   Gemma3ForCausalLM             models/gemma3_config.h
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "hspmd/models/config_reader.h"
#include "hspmd/models/llama_config.h"

namespace hspmd::models {

struct DecoderFamily {
  std::string_view model_type;
  // A config of this family (the reader's "model_type" is this one, or absent for Llama); Error
  // naming the key at fault. Validated.
  LlamaConfig (*from_config)(const ConfigReader& reader);
  // The config in transformers >= 5 form; from_config of it gives the same config.
  nlohmann::json (*to_config)(const LlamaConfig& config);
};

const std::vector<DecoderFamily>& decoder_families();
// nullptr when no family reads `model_type`.
const DecoderFamily* find_decoder_family(std::string_view model_type);
// "\"llama\", \"qwen2\", ...": for errors about an unknown model_type.
std::string known_decoder_model_types();

}  // namespace hspmd::models
