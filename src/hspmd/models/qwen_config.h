// The Qwen2 and Qwen3 families of models/decoder_families.h: Llama's decoder with
//   qwen2  a bias on q/k/v_proj (never on o_proj), no "attention_bias" key;
//   qwen3  q_norm/k_norm (an RMSNorm over each query and key head before RoPE), "attention_bias" on
//          q/k/v/o as Llama's, "head_dim" 128 unless the config says;
// and, for both, sliding-window layers: "use_sliding_window" turns "sliding_window" on for the
// layers "layer_types" marks "sliding_attention" (without "layer_types": the layers from
// "max_window_layers" on, as transformers derives it).
#pragma once

#include <nlohmann/json.hpp>

#include "hspmd/models/config_reader.h"
#include "hspmd/models/llama_config.h"

namespace hspmd::models {

LlamaConfig read_qwen2_config(const ConfigReader& reader);
LlamaConfig read_qwen3_config(const ConfigReader& reader);
// Either family's config.json (by config.decoder.model_type).
nlohmann::json qwen_config_json(const LlamaConfig& config);

}  // namespace hspmd::models
