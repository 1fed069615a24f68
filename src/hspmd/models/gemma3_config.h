// The Gemma 3 text family ("gemma3_text", transformers' Gemma3ForCausalLM) of
// models/decoder_families.h: Llama's decoder with
//   - embeddings scaled by sqrt(hidden_size), tied to the head by default;
//   - RMSNorms scaling by (1 + weight), q_norm/k_norm per head, and norms around the attention and
//     MLP outputs (post_attention_layernorm, pre_ and post_feedforward_layernorm);
//   - gelu_tanh(gate) * up ("hidden_activation": "gelu_pytorch_tanh");
//   - attention logits scaled by query_pre_attn_scalar^-1/2;
//   - "layer_types": local layers with a sliding window and their own RoPE
//     ("rope_parameters": {"sliding_attention": {...}, "full_attention": {...}}) between global ones;
//     transformers < 5 configs say "rope_theta" (global), "rope_local_base_freq" (local),
//     "rope_scaling" (global) and "sliding_window_pattern" (every pattern-th layer global) instead;
//   - "final_logit_softcapping": logits -> cap * tanh(logits / cap) where set.
// Refused: "attn_logit_softcapping" (Gemma 2's attention soft-capping) and bidirectional attention.
#pragma once

#include <nlohmann/json.hpp>

#include "hspmd/models/config_reader.h"
#include "hspmd/models/llama_config.h"

namespace hspmd::models {

LlamaConfig read_gemma3_config(const ConfigReader& reader);
// A config of "model_type" "gemma3" (Gemma3ForConditionalGeneration: the text model under
// "text_config" next to a vision tower, weights named language_model.model.*) is refused with one
// line naming the key and saying how to get the text-only checkpoint hspmd trains; see
// docs/model-config.md.
[[noreturn]] void refuse_gemma3_multimodal(const ConfigReader& reader);
nlohmann::json gemma3_config_json(const LlamaConfig& config);

}  // namespace hspmd::models
