// Compiles a Strategy (pipelines -> stages -> {ranks, layers}) into the AnnotationPlan of the
// built-in Llama: Megatron-style tensor parallelism inside each stage, one sharding subgroup per
// pipeline (pipelines are data-parallel replicas: hdim = -1 for parameters), ZeRO-1 across them.
//
// Per parameter, on the stage of each pipeline that holds it (tp = that stage's rank count):
//   model.embed_tokens.weight [V, H]   (S0:tp)  vocab-parallel, first stage
//   q/k/v_proj, gate/up_proj  [out, H] (S0:tp)  column-parallel
//   o_proj, down_proj         [H, in]  (S1:tp)  row-parallel
//   *layernorm.weight, norm   [H]      (D:tp)
//   q_norm, k_norm .weight    [D]      (D:tp)   per head width: every rank norms its own heads
//   lm_head.weight            [V, H]   (S0:tp)  vocab-parallel, last stage
//   q/k/v_proj, gate/up_proj .bias  [out]  (S0:tp)  split like the column-parallel output
//   o_proj, down_proj .bias         [H]    (D:tp)   added after the row-parallel all-reduce
// e.g. Table 9's first 32B strategy, layer 0's q_proj on R16-19 and R24-27, ZeRO-1 on:
//   "dup{[16-19](S0:4;zero);[24-27](S0:4;zero)}", optimizer state "split1{[16-19](S0:4);[24-27](S0:4)}"
// Activations [T, ...] are split by tokens across pipelines (hdim 0; each pipeline's size is bound at
// run time) and duplicated inside a stage's TP group. Every placeholder and Reshard of the graph
// (models/llama.h) is annotated:
//   input_ids on each first stage; targets, loss_scale (duplicated) on each last stage;
//   positions, cu_seqlens on every rank of each pipeline, and each layer's Reshards P"positions",
//     P"cu_seqlens" on the stage holding the layer (a local copy);
//   model.embed_out, P"attn_in|attn_out|mlp_in|mlp_out" duplicated on the stage (so the partial sums
//     of vocab-parallel embedding and row-parallel projections are all-reduced there);
//   P"output" on the stage of the next consumer (layer l+1 or the final norm): a point-to-point
//     hand-over where a pipeline changes stage, the identity elsewhere;
//   lm_head_out split on the vocabulary over each last stage's TP ranks (vocab-parallel logits; the
//     cross-entropy normalizes each row across those ranks, graph/ops/cross_entropy.cc);
//   lm_head.tied_weight (tied embeddings) column-parallel on each last stage.
// Context parallelism (a stage with "cp": C, docs/context-parallelism.md): the stage's T x C ranks
// are CP-coordinate outer, TP inner. Parameters are duplicated over CP ("(D:C,S0:T)"), so their
// gradients, partial over CP, are all-reduced there; per-token values split their tokens over CP
// ("(S0:C,D:T)"); each layer's P"self_attn.k_all|v_all" all-gather K and V over CP
// ("(D:C,S1:T)") and P"kv_index" every row's packed position; P"cu_seqlens" is the whole batch's.
// The pipeline's group for positions, token_index and cu_seqlens lists its ranks CP-coordinate first.
#pragma once

#include "hspmd/models/llama_config.h"
#include "hspmd/sharding/annotation.h"
#include "hspmd/sharding/plan.h"
#include "hspmd/sharding/strategy.h"

namespace hspmd::models {

// Throws Error naming the pipeline/stage at fault: layers not covered exactly once, or a TP
// degree that does not divide the heads, KV heads, hidden, intermediate or (first/last stage)
// vocab size.
void validate_llama_strategy(const LlamaConfig& config, const sharding::Strategy& strategy);

// The annotation of one parameter under `strategy` (which must be valid for the model).
sharding::Annotation llama_param_annotation(const LlamaParam& param, const sharding::Strategy& strategy);

// Validates, then annotates every parameter (and, with ZeRO-1, its optimizer state), the
// placeholders and the stage-boundary Reshards; copies micro-batching and recomputation.
sharding::AnnotationPlan compile_llama_plan(const LlamaConfig& config, const sharding::Strategy& strategy);

}  // namespace hspmd::models
