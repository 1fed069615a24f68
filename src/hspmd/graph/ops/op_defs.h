// Internal to the graph layer: the registry entries, one function per op kind, defined one op
// family per file in this folder, plus the shape-rule checks they share. build_standard_registry
// (op_registry.cc) is the only caller of the *_def functions, build_cpu_kernels
// (kernel_registry.cc) the only caller of the add_*_kernels functions.
#pragma once

#include <string>
#include <vector>

#include "hspmd/graph/kernel_registry.h"
#include "hspmd/graph/op_registry.h"
#include "hspmd/kernels/attention.h"
#include "hspmd/kernels/cross_entropy.h"

namespace hspmd::graph::detail {

OpDef placeholder_def();    // leaves.cc
OpDef parameter_def();      // leaves.cc
OpDef full_def();           // leaves.cc
OpDef embedding_def();      // embedding.cc
OpDef embedding_bwd_def();  // embedding.cc
OpDef rms_norm_def();       // rms_norm.cc
OpDef rms_norm_bwd_def();   // rms_norm.cc
OpDef matmul_def();         // matmul.cc
OpDef rope_def();           // rope.cc
OpDef rope_bwd_def();       // rope.cc
OpDef attention_def();      // attention.cc
OpDef attention_bwd_def();  // attention.cc
OpDef swiglu_def();         // elementwise.cc
OpDef swiglu_bwd_def();     // elementwise.cc
OpDef add_def();            // elementwise.cc
OpDef geglu_tanh_def();     // elementwise.cc
OpDef geglu_tanh_bwd_def(); // elementwise.cc
OpDef scale_def();          // elementwise.cc
OpDef reshape_def();        // reshape.cc
OpDef reshard_def();        // reshape.cc
OpDef cross_entropy_def();      // cross_entropy.cc
OpDef cross_entropy_bwd_def();  // cross_entropy.cc
OpDef lm_head_loss_def();       // lm_head_loss.cc
OpDef lm_head_loss_bwd_def();   // lm_head_loss.cc
OpDef bias_add_def();       // bias_add.cc
OpDef bias_add_bwd_def();   // bias_add.cc
OpDef context_attention_def();      // context_attention.cc
OpDef context_attention_bwd_def();  // context_attention.cc

// The CPU kernels of each family, keyed by the dtype of the op's output 0.
void add_leaf_kernels(KernelRegistry& r);               // leaves.cc (full; placeholders, parameters are bound)
void add_embedding_kernels(KernelRegistry& r);          // embedding.cc
void add_rms_norm_kernels(KernelRegistry& r);           // rms_norm.cc
void add_matmul_kernels(KernelRegistry& r);             // matmul.cc
void add_rope_kernels(KernelRegistry& r);               // rope.cc
void add_attention_kernels(KernelRegistry& r);          // attention.cc
void add_elementwise_kernels(KernelRegistry& r);        // elementwise.cc
void add_reshape_kernels(KernelRegistry& r);            // reshape.cc
void add_cross_entropy_kernels(KernelRegistry& r);      // cross_entropy.cc
void add_lm_head_loss_kernels(KernelRegistry& r);       // lm_head_loss.cc
void add_bias_add_kernels(KernelRegistry& r);           // bias_add.cc
void add_context_attention_kernels(KernelRegistry& r);  // context_attention.cc

// The dtypes the CPU kernels compute in (kernels/README.md): float32 and float64 everywhere,
// bfloat16 storage in matmul and the elementwise ops, any dtype where an op only moves data.
inline const std::vector<DType> kFloat{DType::kFloat32, DType::kFloat64};
inline const std::vector<DType> kFloatOrBf16{DType::kFloat32, DType::kFloat64, DType::kBFloat16};
inline const std::vector<DType> kAnyDType{DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt32,
                                          DType::kInt64};

// Shape-rule checks: throw Error prefixed with ctx.where() and naming the input.
void expect_rank(const ShapeContext& ctx, int input, int rank);
void expect_floating(const ShapeContext& ctx, int input);
void expect_integer(const ShapeContext& ctx, int input);
void expect_same_dtype(const ShapeContext& ctx, int a, int b);
void expect_same_shape(const ShapeContext& ctx, int a, int b);
// Input a's dim da equals input b's dim db (structurally, after simplification).
void expect_dim_eq(const ShapeContext& ctx, int a, int da, int b, int db);

// Shared by attention.cc and context_attention.cc (defined in attention.cc): the kernels' options
// from the op's attributes, and the shape rules' check of attrs.window (>= 0).
kernels::AttentionOptions attention_options(const OpAttrs& attrs);
void expect_window(const ShapeContext& ctx);

}  // namespace hspmd::graph::detail

// Deduction-rule helpers (deduce_helpers.cc): errors are prefixed with ctx.where().
namespace hspmd::graph::detail {

// "'proj' (matmul)": how the op is named when calling the rules of sharding/deduce.h, whose
// messages start with "op ".
std::string op_label(const DeduceContext& ctx);
// Every input shares dg_union (sharding::check_same_placement, naming the op).
void expect_same_placement(const DeduceContext& ctx);
// Input i holds identical copies everywhere: only D entries and hdim -1 (e.g. a norm weight).
void expect_all_dup(const DeduceContext& ctx, int input);
// Input i equals `expected` (zero flags ignored); the error names both and asks for a Reshard.
void expect_annotation(const DeduceContext& ctx, int input, const sharding::Annotation& expected);
// The annotation with every logical dim d (bottom-tier entries and, when hsize > 1, hdim) replaced by
// map(d); map throws to reject a dim. Adjacent entries mapped to one dim merge; non-adjacent ones
// are an error. Zero flags are cleared. `what` names the tensor in errors.
sharding::Annotation map_dims(const DeduceContext& ctx, const sharding::Annotation& a, const std::string& what,
                              const std::function<int(int)>& map);
// The annotation of the transpose of a 2-D tensor (dims 0 and 1 swapped).
sharding::Annotation transposed(const DeduceContext& ctx, const sharding::Annotation& a);
// The token losses' rules (cross_entropy.cc), shared by cross_entropy and lm_head_loss. The
// annotation of per-token values (targets, lse): the logits' with a vocabulary split read as
// duplication (a vocab-parallel loss normalizes each row across the shards); the logits may not be
// partial or split the vocabulary across subgroups (errors ask for a Reshard before `source`, the
// inputs the logits come from). Checks that input `targets` has it and input `scale` is duplicated.
sharding::Annotation deduce_loss_rows(const DeduceContext& ctx, const sharding::Annotation& logits, int targets,
                                      int scale, const std::string& source);
// The summed loss: partial over every token split of `rows`.
sharding::Annotation deduce_loss_sum(const DeduceContext& ctx, const sharding::Annotation& rows);
// The shape rules' check of attrs.softcap (finite, >= 0).
void expect_softcap(const ShapeContext& ctx);
// The kernels' options from the op's attributes (ignore_index, softcap, this rank's vocabulary columns).
kernels::CrossEntropyOptions token_loss_options(const OpAttrs& attrs);
// From this shard's row statistics [3, T]: gathers the other shards' (vocab-parallel), combines
// them and sets k.outputs = {loss_scale * sum of token losses, lse}.
void finish_token_loss(KernelContext& k, Tensor stats, const Tensor& targets, const Tensor& loss_scale);
// d loss / d losses[t] for the T = k.inputs[0].dim(0) tokens: dloss * loss_scale each.
Tensor token_loss_grads(const KernelContext& k, DType dtype, const Tensor& loss_scale, const Tensor& dloss);
// A leaf or Reshard output fixed by the plan, checked against its shape when the shape is static.
sharding::Annotation planned_output(const DeduceContext& ctx, const TensorInfo& out);

}  // namespace hspmd::graph::detail
