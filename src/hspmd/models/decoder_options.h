// What a decoder family changes in the Llama decoder (models/llama.h): Qwen2, Qwen3, Mistral and
// Gemma 3 are Llama's graph with some of these switched on, set by the family's config parser
// (models/decoder_families.h). The defaults are Llama's, so a default DecoderOptions is Llama.
//
//   family        what it sets
//   qwen2         attention_bias on q/k/v only (o_proj_bias false); sliding windows per layer
//   qwen3         qk_norm; sliding windows per layer
//   mistral       one sliding window on every layer
//   gemma3_text   qk_norm, norm_weight_offset 1, sandwich_norms, kGeluTanh, scale_embeddings,
//                 query_pre_attn_scalar, sliding (local) layers with their own RoPE between global
//                 ones, final_logit_softcap
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hspmd/models/rope_parameters.h"

namespace hspmd::models {

enum class MlpActivation {
  kSilu,      // silu(gate) * up (SwiGLU)
  kGeluTanh,  // gelu_tanh(gate) * up (transformers' gelu_pytorch_tanh)
};

struct DecoderOptions {
  // The config.json "model_type" of the family: which keys its config has, which Hugging Face
  // architecture it exports as.
  std::string model_type = "llama";
  // An RMSNorm over each query and key head (self_attn.q_norm / k_norm, weights [head_dim] shared by
  // every head), between the projection and RoPE.
  bool qk_norm = false;
  // With attention_bias, whether o_proj carries a bias too (Qwen2's bias is on q/k/v only).
  bool o_proj_bias = true;
  // Every RMSNorm scales by (norm_weight_offset + weight): 1 for Gemma, whose weights store the
  // scale minus one and start at 0.
  double norm_weight_offset = 0.0;
  // Gemma: the attention and MLP outputs are normed before their residual add
  // (post_attention_layernorm, post_feedforward_layernorm) and the MLP reads
  // pre_feedforward_layernorm of the stream; Llama's post_attention_layernorm is the MLP's input norm.
  bool sandwich_norms = false;
  MlpActivation activation = MlpActivation::kSilu;
  // Gemma: the embedding rows are multiplied by sqrt(hidden_size), rounded to float32.
  bool scale_embeddings = false;
  // Gemma: the attention logits are scaled by query_pre_attn_scalar^-1/2 instead of head_dim^-1/2
  // (0: head_dim).
  double query_pre_attn_scalar = 0.0;
  // The window W of the sliding-window layers: the token at position i of its document attends to
  // the positions i - W < j <= i (transformers' sliding_window). 0: no layer slides.
  int64_t sliding_window = 0;
  // Per decoder layer, whether it slides (transformers' layer_types: "sliding_attention" or
  // "full_attention"); empty when no layer does.
  std::vector<bool> sliding_layers;
  // Gemma: the RoPE of the sliding layers (the config's rope is the full-attention layers'); unset:
  // every layer uses the config's.
  std::optional<RopeParameters> sliding_rope;
  // Gemma: the logits become cap * tanh(logits / cap) before the loss; 0: none.
  double final_logit_softcap = 0.0;

  bool is_sliding(int layer) const {
    return layer >= 0 && static_cast<size_t>(layer) < sliding_layers.size() && sliding_layers[layer];
  }
  // The attention window of `layer`; 0: every earlier position of the document.
  int64_t window_of(int layer) const { return is_sliding(layer) ? sliding_window : 0; }
  // transformers' "layer_types" of `layers` layers.
  std::vector<std::string> layer_types(int64_t layers) const;
  // The same options for a model of `layers` layers: the sliding pattern repeated or cut (the
  // profiler times shorter models of the same kind).
  DecoderOptions with_layers(int64_t layers) const;
  // Error naming the key at fault (a window without sliding layers, layer_types of another length).
  void validate(int64_t layers) const;

  friend bool operator==(const DecoderOptions&, const DecoderOptions&) = default;
};

}  // namespace hspmd::models
