// The Llama training graph, built from a LlamaConfig, in the single-device view (a defined graph).
//
//   LlamaModel m = build_llama(LlamaConfig::from_file("configs/llama-tiny.json"));
//   TensorMap params = init_parameters(m.graph, /*seed=*/1234);   // Hugging Face names
//   Executor ex(m.graph, m.fetches());                             // loss, then every gradient
//   std::vector<Tensor> out = ex.run(feeds, params);
//
// Placeholders (T tokens of a packed batch of N documents; both symbolic, so one graph serves every
// batch shape):
//   input_ids  [T] int64       token ids, documents concatenated
//   positions  [T] int64       position of each token within its document (RoPE restarts at 0)
//   cu_seqlens [N + 1] int64   document offsets: document s is tokens [cu[s], cu[s+1])
//   targets    [T] int64       next-token label, -100 where none (last token of a document)
//   loss_scale []  (dtype)     1 / number of labelled tokens in the GLOBAL batch (architecture §9)
//   token_index [T] int64      position of each fed token in the packed batch: 0..T-1, except under
//                              context parallelism, whose load-balanced order the trainer feeds
//                              (data/context_parallel.h, docs/context-parallelism.md)
// Output: loss [] = loss_scale * sum of token cross-entropies.
//
// Per layer l (prefix P = "model.layers.<l>."), op names follow the Hugging Face modules:
//   positions -> Reshard P"positions", cu_seqlens -> Reshard P"cu_seqlens" (what the layer's RoPE and
//     attention read: a pipeline feeds the placeholders to all its ranks, each stage takes its copy);
//   token_index -> Reshard P"token_index" (the query rows' packed positions) -> Reshard P"kv_index"
//     (every row's: all-gathered over a CP group, the identity otherwise)
//   x -> P"input_layernorm" -> Reshard P"attn_in" -> P"self_attn.{q,k,v}_proj" -> rope
//     -> Reshards P"self_attn.k_all", P"self_attn.v_all" of k and v (all-gathered over a CP group,
//     the identity otherwise) -> context_attention (GQA, causal within documents, queries by their
//     packed position) -> P"self_attn.o_proj" -> Reshard P"attn_out"
//     -> residual add -> P"post_attention_layernorm" -> Reshard P"mlp_in"
//     -> P"mlp.{gate,up}_proj" -> swiglu -> P"mlp.down_proj" -> Reshard P"mlp_out"
//     -> residual add -> Reshard P"output"
// Reshard markers: "attn_in"/"mlp_in" sit where tensor parallelism needs the block input
// duplicated (or gathered, for sequence parallelism), "attn_out"/"mlp_out" where the row-parallel
// projection leaves a partial sum to reduce, "output" between layers where a pipeline may cut.
// Before the layers: "model.embed_tokens" (embedding) -> Reshard "model.embed_out"; after them:
// "model.norm" -> "loss" (lm_head_loss: the head's product and the cross-entropy in one op), or with
// LlamaBuildOptions::fused_head_loss off "model.norm" -> "lm_head" -> Reshard "lm_head_out" -> "loss"
// (matmul and cross_entropy). With tied embeddings the head reads
// the embedding table through Reshard "lm_head.tied_weight" (the table may live on another stage).
// Ops of layer l carry layer tag l (per-layer recomputation, pipeline stages); parameters carry the
// layer of llama_parameters().
//
// The family's options (config.decoder, models/decoder_options.h) change the layer thus:
//   qk_norm         q and k heads -> P"self_attn.q_norm" / P"self_attn.k_norm" (RMSNorm over the head
//                   width) before RoPE;
//   sandwich_norms  attention output -> P"post_attention_layernorm" before the residual add; the MLP
//                   reads P"pre_feedforward_layernorm"; MLP output -> P"post_feedforward_layernorm";
//   sliding layers  their own RoPE (sliding_rope) and attention window;
//   query_pre_attn_scalar  the attention's softmax scale;
//   norm_weight_offset     every RMSNorm scales by (offset + weight);
//   activation      P"mlp.act" is swiglu or geglu_tanh;
//   scale_embeddings       "model.embed_out" -> "model.embed_scale" (x sqrt(hidden));
//   final_logit_softcap    the loss op caps the logits first (cross_entropy / lm_head_loss softcap).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hspmd/graph/graph.h"
#include "hspmd/models/llama_config.h"

namespace hspmd::models {

struct LlamaBuildOptions {
  DType dtype = DType::kFloat32;  // parameters and activations (float64 for gradient checks)
  double init_std = 0.02;         // normal std of embedding and projection weights (norms start at 1)
  bool with_backward = true;      // also build d loss / d every parameter
  // kFloat32, or kBFloat16 for bf16 mixed precision: every matmul and attention (forward and
  // backward) rounds its operands to bfloat16 and accumulates in float32; parameters, activations,
  // gradients and the optimizer stay float32 (docs/mixed-precision.md). Needs dtype kFloat32.
  DType precision = DType::kFloat32;
  // true: the head and the loss are one lm_head_loss op, which goes through the tokens in chunks and
  // never holds the logits [T, V] or their gradient (graph/ops/lm_head_loss.cc), at the price of
  // computing x w^T twice; false: a matmul "lm_head", a Reshard "lm_head_out" and a cross_entropy
  // "loss". Both compute the same loss and gradients. Unset: fused for vocabularies of
  // kFusedHeadLossVocab entries and more, where the logits dominate the activations.
  std::optional<bool> fused_head_loss{};
};

// Measured by bench/head_loss_bench.cc (docs/cpu-kernels.md): 2048 tokens x H 512 at V 32000,
// 500 MiB of logits and gradient apart against 16 MiB fused, the fused head at 0.7-0.8 of the
// speed; at V 2048 it saves 24 MiB for 0.85 of the speed.
inline constexpr int64_t kFusedHeadLossVocab = 16384;

struct LlamaModel {
  LlamaConfig config;
  graph::Graph graph;
  graph::TensorRef input_ids, positions, cu_seqlens, targets, loss_scale, token_index;  // placeholders
  graph::TensorRef loss;
  std::vector<std::string> param_names;  // llama_parameters() order
  std::vector<graph::TensorRef> params;  // same order
  std::vector<graph::TensorRef> grads;   // same order; empty without backward

  // {loss, grads...}: what a training step fetches.
  std::vector<graph::TensorRef> fetches() const;
};

LlamaModel build_llama(const LlamaConfig& config, const LlamaBuildOptions& options = {});

// Names of the Reshard markers of decoder layer `layer`, in graph order.
std::vector<std::string> llama_layer_reshard_names(int layer);

}  // namespace hspmd::models
