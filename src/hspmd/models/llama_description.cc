#include "hspmd/models/llama_description.h"

#include <cstdio>
#include <sstream>

namespace hspmd::models {

namespace {

std::string architecture_name(const std::string& model_type) {
  if (model_type == "llama") return "Llama";
  if (model_type == "qwen2") return "Qwen2";
  if (model_type == "qwen3") return "Qwen3";
  if (model_type == "mistral") return "Mistral";
  if (model_type == "gemma3_text") return "Gemma 3 (text)";
  return model_type;
}

void describe_rope(std::ostream& s, const std::string& label, const RopeParameters& rope, int64_t head_dim) {
  s << label << ": " << rope.to_string() << "\n" << label << " inverse frequencies (" << head_dim / 2 << "):";
  char buf[32];
  for (double f : rope.inverse_frequencies(head_dim)) {
    std::snprintf(buf, sizeof buf, " %.6g", f);
    s << buf;
  }
  s << "\n";
}

// Which layers slide: "layers 0, 1, 3 of 4".
std::string sliding_layers_of(const LlamaConfig& c) {
  std::string layers;
  int n = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    if (!c.decoder.is_sliding(l)) continue;
    layers += (layers.empty() ? "" : ", ") + std::to_string(l);
    ++n;
  }
  return n == c.num_hidden_layers ? "every layer" : "layers " + layers + " of " + std::to_string(c.num_hidden_layers);
}

void describe_architecture(std::ostream& s, const LlamaConfig& c) {
  const DecoderOptions& d = c.decoder;
  s << "architecture: " << architecture_name(d.model_type) << ", " << c.num_hidden_layers << " layers, hidden "
    << c.hidden_size << ", intermediate " << c.intermediate_size << ", vocab " << c.vocab_size << "\n";
  s << "attention: " << c.num_attention_heads << " query heads over " << c.num_key_value_heads
    << " key/value heads, head dim " << c.head_dim()
    << (c.explicit_head_dim > 0 ? " (head_dim, not hidden / heads)" : "");
  if (c.attention_bias) s << (d.o_proj_bias ? "; q/k/v/o biases" : "; q/k/v biases (none on o_proj)");
  if (d.query_pre_attn_scalar > 0) {
    s << "; logits scaled by query_pre_attn_scalar " << d.query_pre_attn_scalar << "^-1/2";
  }
  s << "\n";
  if (d.sliding_window > 0) {
    const std::string layers = sliding_layers_of(c);
    s << "sliding window: " << d.sliding_window << " positions on " << layers
      << (layers == "every layer" ? "" : " (the others attend to every earlier position)") << "\n";
  }
  if (d.qk_norm) {
    s << "q/k norm: RMSNorm over each head's " << c.head_dim() << " values (self_attn.q_norm, self_attn.k_norm)\n";
  }
  s << "norm: RMSNorm eps " << c.rms_norm_eps << (d.norm_weight_offset != 0 ? ", scaled by (1 + weight)" : "")
    << (d.sandwich_norms ? ", also on the attention and MLP outputs (post_attention_layernorm, "
                           "post_feedforward_layernorm) with pre_feedforward_layernorm before the MLP"
                         : "")
    << "; MLP: " << (d.activation == MlpActivation::kSilu ? "silu(gate) * up" : "gelu_tanh(gate) * up") << "\n";
  s << "embeddings " << (c.tie_word_embeddings ? "tied (lm_head reads embed_tokens)" : "untied")
    << (d.scale_embeddings ? ", scaled by sqrt(hidden)" : "");
  if (d.final_logit_softcap > 0) s << "; logits soft-capped at " << d.final_logit_softcap;
  s << "; weights stored as " << c.weights_dtype << "\n";
  s << "max_position_embeddings " << c.max_position_embeddings << "\n";
  if (d.sliding_rope) {
    describe_rope(s, "rope (full-attention layers)", c.rope, c.head_dim());
    describe_rope(s, "rope (sliding layers)", *d.sliding_rope, c.head_dim());
  } else {
    describe_rope(s, "rope", c.rope, c.head_dim());
  }
}

void describe_parameters(std::ostream& s, const LlamaConfig& c) {
  s << "parameters: " << c.num_parameters() << "\n";
  int64_t per_layer = 0;
  char buf[160];
  for (const LlamaParam& p : llama_parameters(c)) {
    if (p.layer > 0) continue;  // layer 0 stands for every decoder layer
    if (p.layer == 0) per_layer += p.shape.numel();
    std::snprintf(buf, sizeof buf, "  %-50s %s\n", p.name.c_str(), p.shape.to_string().c_str());
    s << buf;
  }
  if (c.num_hidden_layers > 1) {
    s << "  (layers 1.." << c.num_hidden_layers - 1 << ": the same shapes; " << per_layer << " parameters per layer)\n";
  }
  if (c.tie_word_embeddings) s << "  lm_head: tied to model.embed_tokens.weight\n";
}

}  // namespace

std::string describe_llama(const LlamaConfig& config) {
  std::ostringstream s;
  describe_architecture(s, config);
  describe_parameters(s, config);
  return s.str();
}

}  // namespace hspmd::models
