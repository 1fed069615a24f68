// What `hspmd model info` says of a Llama-family model (models/llama_model.h, Model::describe()):
// the architecture, what the family changes in the decoder (models/decoder_options.h), the RoPE in
// use with its inverse frequencies, the parameter count and every parameter's shape, one decoder
// layer standing for all.
//
//   architecture: qwen3, 2 layers, hidden 16, intermediate 32, vocab 96
//   attention: 4 query heads over 2 key/value heads, head dim 8 (head_dim, not hidden / heads)
//   q/k norm: RMSNorm over each head's 8 values (self_attn.q_norm, self_attn.k_norm)
//   ...
#pragma once

#include <string>

#include "hspmd/models/llama_config.h"

namespace hspmd::models {

std::string describe_llama(const LlamaConfig& config);

}  // namespace hspmd::models
