#include "hspmd/models/llama.h"

#include <cmath>
#include <map>

#include "hspmd/core/error.h"
#include "hspmd/graph/autograd.h"
#include "hspmd/graph/ops.h"

namespace hspmd::models {

using graph::Graph;
using graph::TensorRef;
namespace ops = graph::ops;

std::vector<TensorRef> LlamaModel::fetches() const {
  std::vector<TensorRef> out{loss};
  out.insert(out.end(), grads.begin(), grads.end());
  return out;
}

std::vector<std::string> llama_layer_reshard_names(int layer) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  return {p + "positions",        p + "cu_seqlens",       p + "token_index", p + "kv_index", p + "attn_in",
          p + "self_attn.k_all", p + "self_attn.v_all", p + "attn_out",    p + "mlp_in",   p + "mlp_out",
          p + "output"};
}

namespace {

// The softmax scale of the attention of a layer whose RoPE is `rope`: query_pre_attn_scalar^-1/2
// where the family sets it, else head_dim^-1/2; YaRN scales cos and sin, i.e. rotated q and k, by
// s: every logit by s^2. 0 (the attention op's default 1/sqrt(D)) when neither applies.
double attention_scale_of(const LlamaConfig& c, const RopeParameters& rope) {
  const double s = rope.cos_sin_scale();
  const double base = c.decoder.query_pre_attn_scalar > 0 ? c.decoder.query_pre_attn_scalar
                                                          : static_cast<double>(c.head_dim());
  if (s == 1.0 && c.decoder.query_pre_attn_scalar == 0) return 0.0;
  return s * s / std::sqrt(base);
}

// The RoPE of decoder layer `layer`: the sliding layers' own where the family has one.
const RopeParameters& rope_of(const LlamaConfig& c, int layer) {
  return c.decoder.is_sliding(layer) && c.decoder.sliding_rope ? *c.decoder.sliding_rope : c.rope;
}

struct Builder {
  const LlamaConfig& c;
  Graph& g;
  std::map<std::string, TensorRef> w;  // parameters by name
  TensorRef positions, cu_seqlens, q_index, kv_index;  // of the current layer (Reshards of the placeholders)
  TensorRef m_positions, m_cu_seqlens, m_token_index;   // the placeholders
  SymExpr T = SymExpr::symbol("T");
  bool bf16 = false;  // bf16 mixed precision: matmuls and attention round their operands

  // Every RMSNorm of the model, (offset + weight) as the family scales.
  TensorRef norm(TensorRef x, const std::string& module) {
    return ops::rms_norm(g, x, w.at(module + ".weight"), c.rms_norm_eps, module, c.decoder.norm_weight_offset);
  }

  TensorRef linear(TensorRef x, const std::string& weight_name, const std::string& name) {
    return ops::matmul(g, x, w.at(weight_name), {.trans_b = true, .bf16_operands = bf16}, name);
  }

  // A column-parallel projection's bias goes right after its matmul (the output is split like the
  // bias); a row-parallel one's (o_proj, down_proj) after the Reshard that sums the partial
  // outputs, so it is added once.
  TensorRef with_bias(TensorRef x, bool has_bias, const std::string& module) {
    return has_bias ? ops::bias_add(g, x, w.at(module + ".bias"), module + ".bias_add") : x;
  }

  // x W^T (+ b) of a column-parallel module ("model.layers.0.self_attn.q_proj").
  TensorRef projection(TensorRef x, const std::string& module, bool has_bias) {
    return with_bias(linear(x, module + ".weight", module), has_bias, module);
  }

  TensorRef attention_block(TensorRef h, const std::string& p, int layer) {
    const int64_t D = c.head_dim(), nq = c.num_attention_heads, nkv = c.num_key_value_heads;
    const bool ab = c.attention_bias;
    TensorRef q = projection(h, p + "self_attn.q_proj", ab);
    TensorRef k = projection(h, p + "self_attn.k_proj", ab);
    TensorRef v = projection(h, p + "self_attn.v_proj", ab);
    q = ops::reshape(g, q, {T, nq, D}, p + "self_attn.q_heads");
    k = ops::reshape(g, k, {T, nkv, D}, p + "self_attn.k_heads");
    v = ops::reshape(g, v, {T, nkv, D}, p + "self_attn.v_heads");
    if (c.decoder.qk_norm) {  // over the last dim: each head of each token alike
      q = norm(q, p + "self_attn.q_norm");
      k = norm(k, p + "self_attn.k_norm");
    }
    // RoPE's inverse frequencies, scaled as the config says.
    const RopeParameters& rope = rope_of(c, layer);
    const std::vector<double> inv_freq = rope.inverse_frequencies(D);
    q = ops::rope(g, q, positions, inv_freq, p + "self_attn.q_rope");
    k = ops::rope(g, k, positions, inv_freq, p + "self_attn.k_rope");
    // Under context parallelism every rank needs every key and value of its documents.
    k = ops::reshard(g, k, p + "self_attn.k_all");
    v = ops::reshard(g, v, p + "self_attn.v_all");
    TensorRef o = ops::context_attention(g, q, k, v, cu_seqlens, q_index, kv_index, p + "self_attn.attention",
                                         attention_scale_of(c, rope), bf16, c.decoder.window_of(layer));
    o = ops::reshape(g, o, {T, nq * D}, p + "self_attn.merge_heads");
    return linear(o, p + "self_attn.o_proj.weight", p + "self_attn.o_proj");
  }

  TensorRef mlp_block(TensorRef h, const std::string& p) {
    TensorRef gate = projection(h, p + "mlp.gate_proj", c.mlp_bias);
    TensorRef up = projection(h, p + "mlp.up_proj", c.mlp_bias);
    TensorRef a = c.decoder.activation == MlpActivation::kSilu ? ops::swiglu(g, gate, up, p + "mlp.act")
                                                               : ops::geglu_tanh(g, gate, up, p + "mlp.act");
    return linear(a, p + "mlp.down_proj.weight", p + "mlp.down_proj");
  }

  TensorRef decoder_layer(TensorRef x, int l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    g.set_layer(l);
    positions = ops::reshard(g, m_positions, p + "positions");
    cu_seqlens = ops::reshard(g, m_cu_seqlens, p + "cu_seqlens");
    q_index = ops::reshard(g, m_token_index, p + "token_index");
    kv_index = ops::reshard(g, q_index, p + "kv_index");
    const bool sandwich = c.decoder.sandwich_norms;
    TensorRef h = ops::reshard(g, norm(x, p + "input_layernorm"), p + "attn_in");
    TensorRef a = with_bias(ops::reshard(g, attention_block(h, p, l), p + "attn_out"),
                            c.attention_bias && c.decoder.o_proj_bias, p + "self_attn.o_proj");
    if (sandwich) a = norm(a, p + "post_attention_layernorm");
    x = ops::add(g, x, a, p + "attn_residual");
    h = norm(x, p + (sandwich ? "pre_feedforward_layernorm" : "post_attention_layernorm"));
    h = ops::reshard(g, h, p + "mlp_in");
    TensorRef m = with_bias(ops::reshard(g, mlp_block(h, p), p + "mlp_out"), c.mlp_bias, p + "mlp.down_proj");
    if (sandwich) m = norm(m, p + "post_feedforward_layernorm");
    x = ops::add(g, x, m, p + "mlp_residual");
    x = ops::reshard(g, x, p + "output");
    g.set_layer(-1);
    return x;
  }
};

}  // namespace

LlamaModel build_llama(const LlamaConfig& config, const LlamaBuildOptions& options) {
  config.validate();
  HSPMD_CHECK(is_floating(options.dtype)) << "build_llama: dtype must be floating, got "
                                          << dtype_name(options.dtype);
  HSPMD_CHECK(options.precision == DType::kFloat32 ||
              (options.precision == DType::kBFloat16 && options.dtype == DType::kFloat32))
      << "build_llama: precision must be float32, or bfloat16 over float32 parameters; got precision "
      << dtype_name(options.precision) << " with dtype " << dtype_name(options.dtype);
  LlamaModel m;
  m.config = config;
  Graph& g = m.graph;
  const SymExpr T = SymExpr::symbol("T"), N = SymExpr::symbol("N");
  m.input_ids = g.placeholder("input_ids", {T}, DType::kInt64);
  m.positions = g.placeholder("positions", {T}, DType::kInt64);
  m.cu_seqlens = g.placeholder("cu_seqlens", {N + 1}, DType::kInt64);
  m.targets = g.placeholder("targets", {T}, DType::kInt64);
  m.loss_scale = g.placeholder("loss_scale", {}, options.dtype);
  m.token_index = g.placeholder("token_index", {T}, DType::kInt64);

  Builder b{config, g, {}, {}, {}, {}, {}, m.positions, m.cu_seqlens, m.token_index};
  b.bf16 = options.precision == DType::kBFloat16;
  for (const LlamaParam& p : llama_parameters(config)) {
    // Norm weights start at scale 1 and biases at 0, as in transformers.
    const bool bias = p.name.ends_with(".bias");
    const bool norm = p.role == LlamaParamRole::kNorm || p.role == LlamaParamRole::kHeadNorm;
    // Norms scaling by (1 + weight) start at 0, which is the same scale of 1.
    graph::InitSpec init = norm ? (config.decoder.norm_weight_offset == 0 ? graph::InitSpec::ones()
                                                                           : graph::InitSpec::zeros())
                           : bias                          ? graph::InitSpec::zeros()
                                                           : graph::InitSpec::normal(options.init_std);
    g.set_layer(p.layer);
    TensorRef ref = g.parameter(p.name, p.shape, options.dtype, init);
    b.w[p.name] = ref;
    m.param_names.push_back(p.name);
    m.params.push_back(ref);
  }
  g.set_layer(-1);

  TensorRef x = ops::embedding(g, b.w.at("model.embed_tokens.weight"), m.input_ids, "model.embed_tokens",
                               config.pad_token_id);
  x = ops::reshard(g, x, "model.embed_out");
  // Gemma: sqrt(hidden) as transformers holds it, a float32 buffer.
  if (config.decoder.scale_embeddings) {
    x = ops::scale(g, x, static_cast<float>(std::sqrt(static_cast<double>(config.hidden_size))), "model.embed_scale");
  }
  for (int l = 0; l < config.num_hidden_layers; ++l) x = b.decoder_layer(x, l);
  x = b.norm(x, "model.norm");
  // A tied head reads the embedding table through a Reshard, so a pipeline may keep the table on
  // its first stage and the head on its last; the Reshard's backward brings the gradient home.
  TensorRef head = config.tie_word_embeddings ? ops::reshard(g, b.w.at("model.embed_tokens.weight"), "lm_head.tied_weight")
                                              : b.w.at("lm_head.weight");
  if (options.fused_head_loss.value_or(config.vocab_size >= kFusedHeadLossVocab)) {
    m.loss = ops::lm_head_loss(g, x, head, m.targets, m.loss_scale, -100, b.bf16, "loss",
                               config.decoder.final_logit_softcap);
  } else {
    TensorRef logits = ops::matmul(g, x, head, {.trans_b = true, .bf16_operands = b.bf16}, "lm_head");  // [T, V]
    logits = ops::reshard(g, logits, "lm_head_out");
    m.loss = ops::cross_entropy(g, logits, m.targets, m.loss_scale, -100, "loss", config.decoder.final_logit_softcap);
  }
  if (options.with_backward) m.grads = graph::build_backward(g, m.loss, m.params);
  return m;
}

}  // namespace hspmd::models
