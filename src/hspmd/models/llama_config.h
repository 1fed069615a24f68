// Llama model hyper-parameters, read from a Hugging Face style config.json:
//
//   { "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
//     "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 260,
//     "rms_norm_eps": 1e-5, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
//     "max_position_embeddings": 512, "tie_word_embeddings": false }
//
// Every key is either read, known not to change the model (token ids, generation settings, ...),
// or refused with an error naming the file, the key and the value: a config that would make hspmd
// compute a different model than transformers does never loads (docs/model-config.md lists them).
// RoPE is read from either config generation (rope_parameters.h). Parameters use Hugging Face
// Llama tensor names (see llama_parameters()), so Hugging Face checkpoints load by name.
//
// The decoder families built as variants of Llama's graph (Qwen2, Qwen3, Mistral, Gemma 3) are
// LlamaConfigs too: `decoder` holds what the family changes (models/decoder_options.h), and
// from_json_text() reads a config of any of them by its "model_type" (models/decoder_families.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hspmd/core/shape.h"
#include "hspmd/models/decoder_options.h"
#include "hspmd/models/rope_parameters.h"

namespace hspmd::models {

struct LlamaConfig {
  int64_t hidden_size = 64;
  int64_t intermediate_size = 176;
  int64_t num_hidden_layers = 2;
  int64_t num_attention_heads = 4;
  int64_t num_key_value_heads = 2;
  int64_t vocab_size = 260;
  // "head_dim": set when a head is not hidden_size / num_attention_heads wide (0: that quotient).
  int64_t explicit_head_dim = 0;
  double rms_norm_eps = 1e-5;
  RopeParameters rope;  // every layer's, or (decoder.sliding_rope set) the full-attention layers'

  int64_t max_position_embeddings = 512;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v/o_proj carry a bias (o_proj only with decoder.o_proj_bias)
  bool mlp_bias = false;        // gate/up/down_proj carry a bias
  // "torch_dtype" / "dtype": how the checkpoint stores its weights ("float32", "bfloat16",
  // "float64"). hspmd computes in its own dtype whatever this says; `model info --weights` checks
  // the file against it.
  std::string weights_dtype = "float32";
  // "pad_token_id": transformers builds the embedding as nn.Embedding(padding_idx = pad_token_id),
  // which gives that row no gradient from the lookup; -1: none (null or absent, unless the family
  // defaults to an id, as Gemma 3 to 0).
  int64_t pad_token_id = -1;
  DecoderOptions decoder;  // what the family changes in the Llama decoder; default: Llama itself

  int64_t head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : hidden_size / num_attention_heads; }
  // Throws Error naming the offending key (e.g. heads not dividing hidden_size).
  void validate() const;
  int64_t num_parameters() const;

  // Parses config.json text of any decoder family (by "model_type"; absent: llama); `source` names
  // the file in error messages. Missing required keys, wrong types, unknown keys and values hspmd
  // does not compute are errors.
  static LlamaConfig from_json_text(const std::string& text, const std::string& source);
  // `path` is a config.json, or a directory holding one (a save_pretrained directory).
  static LlamaConfig from_file(const std::string& path);
  // Transformers >= 5 form of the family's config; from_json_text(to_json_text()) gives the same
  // config.
  std::string to_json_text() const;
};

// What a parameter is, for code that treats parameters by role (sharding plans, initializers).
enum class LlamaParamRole {
  kEmbedding,  // model.embed_tokens.weight            [V, H]
  kNorm,       // *layernorm.weight, model.norm.weight [H]
  kHeadNorm,   // self_attn.q_norm.weight, k_norm.weight [D] (decoder.qk_norm): one per head width
  kQProj,      // self_attn.q_proj.weight              [Nq*D, H]
  kKProj,      // self_attn.k_proj.weight              [Nkv*D, H]
  kVProj,      // self_attn.v_proj.weight              [Nkv*D, H]
  kOProj,      // self_attn.o_proj.weight              [H, Nq*D]
  kGateProj,   // mlp.gate_proj.weight                 [F, H]
  kUpProj,     // mlp.up_proj.weight                   [F, H]
  kDownProj,   // mlp.down_proj.weight                 [H, F]
  kLmHead,     // lm_head.weight                       [V, H] (absent when tied)
  // Biases (attention_bias: q/k/v/o, mlp_bias: gate/up/down), each [out features]:
  kQBias, kKBias, kVBias, kOBias, kGateBias, kUpBias, kDownBias,
};

struct LlamaParam {
  std::string name;  // Hugging Face name, e.g. "model.layers.3.self_attn.q_proj.weight"
  Shape shape;
  LlamaParamRole role;
  int layer;  // decoder layer index; -1 for embedding, final norm and lm_head
};

// Every parameter of the model in a fixed order (embedding, layers 0..L-1, final norm, lm_head);
// a projection's bias, when the config has one, right after its weight. A layer holds, in order:
// input_layernorm, q/k/v/o_proj, [q_norm, k_norm], post_attention_layernorm,
// [pre_feedforward_layernorm], gate/up/down_proj, [post_feedforward_layernorm] (brackets: the
// family's options, decoder.qk_norm and decoder.sandwich_norms).
std::vector<LlamaParam> llama_parameters(const LlamaConfig& config);

class ConfigReader;
// The "llama" family of models/decoder_families.h: its keys read from a config, and written.
LlamaConfig read_llama_config(const ConfigReader& reader);
nlohmann::json llama_config_json(const LlamaConfig& config);

}  // namespace hspmd::models
