// The Mistral family of models/decoder_families.h: Llama's decoder with one sliding window on every
// layer ("sliding_window": a token attends to the latest sliding_window positions of its document,
// itself included; null: plain causal attention; absent: transformers' default 4096).
#pragma once

#include <nlohmann/json.hpp>

#include "hspmd/models/config_reader.h"
#include "hspmd/models/llama_config.h"

namespace hspmd::models {

LlamaConfig read_mistral_config(const ConfigReader& reader);
nlohmann::json mistral_config_json(const LlamaConfig& config);

}  // namespace hspmd::models
