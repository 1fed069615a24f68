// Compiles a Strategy (pipelines -> stages -> {ranks, layers}) into the AnnotationPlan of the
// built-in Llama: Megatron-style tensor parallelism inside each stage, one sharding subgroup per
// pipeline (pipelines are data-parallel replicas: hdim = -1 for parameters), ZeRO-1 across them.
//
// Per parameter, on the stage of each pipeline that holds it (tp = that stage's rank count):
//   model.embed_tokens.weight [V, H]   (S0:tp)  vocab-parallel, first stage
//   q/k/v_proj, gate/up_proj  [out, H] (S0:tp)  column-parallel
//   o_proj, down_proj         [H, in]  (S1:tp)  row-parallel
//   *layernorm.weight, norm   [H]      (D:tp)
//   lm_head.weight            [V, H]   (S0:tp)  vocab-parallel, last stage
// e.g. Table 9's first 32B strategy, layer 0's q_proj on R16-19 and R24-27, ZeRO-1 on:
//   "dup{[16-19](S0:4;zero);[24-27](S0:4;zero)}", optimizer state "split1{[16-19](S0:4);[24-27](S0:4)}"
// Placeholders input_ids / labels [B, S] are split by batch across pipelines (hdim 0, per-pipeline
// sizes at run time) on each first / last stage; "model.layers.<l>.input" names the Reshard of
// the hidden states [B, S, H] into layer l wherever some pipeline starts a new stage at l.
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
