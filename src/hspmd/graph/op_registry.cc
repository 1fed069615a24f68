#include "hspmd/graph/op_registry.h"

#include "hspmd/core/error.h"
#include "hspmd/graph/ops/op_defs.h"

namespace hspmd::graph {

namespace {

// The exhaustiveness guard: no default label, so -Wswitch (in -Wall, an error under -Werror)
// flags any OpKind without an entry.
OpDef def_for(OpKind kind) {
  switch (kind) {
    case OpKind::kPlaceholder: return detail::placeholder_def();
    case OpKind::kParameter: return detail::parameter_def();
    case OpKind::kFull: return detail::full_def();
    case OpKind::kEmbedding: return detail::embedding_def();
    case OpKind::kEmbeddingBwd: return detail::embedding_bwd_def();
    case OpKind::kRmsNorm: return detail::rms_norm_def();
    case OpKind::kRmsNormBwd: return detail::rms_norm_bwd_def();
    case OpKind::kMatmul: return detail::matmul_def();
    case OpKind::kRope: return detail::rope_def();
    case OpKind::kRopeBwd: return detail::rope_bwd_def();
    case OpKind::kAttention: return detail::attention_def();
    case OpKind::kAttentionBwd: return detail::attention_bwd_def();
    case OpKind::kSwiglu: return detail::swiglu_def();
    case OpKind::kSwigluBwd: return detail::swiglu_bwd_def();
    case OpKind::kAdd: return detail::add_def();
    case OpKind::kReshape: return detail::reshape_def();
    case OpKind::kReshard: return detail::reshard_def();
    case OpKind::kCrossEntropy: return detail::cross_entropy_def();
    case OpKind::kCrossEntropyBwd: return detail::cross_entropy_bwd_def();
    case OpKind::kBiasAdd: return detail::bias_add_def();
    case OpKind::kBiasAddBwd: return detail::bias_add_bwd_def();
    case OpKind::kContextAttention: return detail::context_attention_def();
    case OpKind::kContextAttentionBwd: return detail::context_attention_bwd_def();
    case OpKind::kLmHeadLoss: return detail::lm_head_loss_def();
    case OpKind::kLmHeadLossBwd: return detail::lm_head_loss_bwd_def();
    case OpKind::kGegluTanh: return detail::geglu_tanh_def();
    case OpKind::kGegluTanhBwd: return detail::geglu_tanh_bwd_def();
    case OpKind::kScale: return detail::scale_def();
  }
  HSPMD_ASSERT(false) << "OpKind " << static_cast<int>(kind) << " has no registry entry";
  return {};
}

}  // namespace

std::string ShapeContext::where() const {
  return "op '" + op.name + "' (" + std::string(op_kind_name(op.kind)) + ")";
}

std::string DeduceContext::where() const {
  return "op '" + op.name + "' (" + std::string(op_kind_name(op.kind)) + ")";
}

std::vector<OpDef> build_standard_registry() {
  std::vector<OpDef> defs;
  for (int k = 0; k < kNumOpKinds; ++k) defs.push_back(def_for(static_cast<OpKind>(k)));
  return defs;
}

OpRegistry::OpRegistry(std::vector<OpDef> defs) : defs_(std::move(defs)) {
  HSPMD_ASSERT(static_cast<int>(defs_.size()) == kNumOpKinds) << defs_.size() << " registry entries";
  for (int k = 0; k < kNumOpKinds; ++k) {
    const OpDef& d = defs_[k];
    HSPMD_ASSERT(static_cast<int>(d.kind) == k) << "registry entry " << k << " is for " << d.name;
    HSPMD_ASSERT(d.infer) << "op kind " << d.name << " has no shape rule";
    HSPMD_ASSERT(d.deduce) << "op kind " << d.name << " has no deduction rule";
  }
}

const OpDef& OpRegistry::get(OpKind kind) const { return defs_.at(static_cast<size_t>(kind)); }

const OpRegistry& OpRegistry::standard() {
  static const OpRegistry registry(build_standard_registry());
  return registry;
}

std::string_view op_kind_name(OpKind kind) { return OpRegistry::standard().get(kind).name; }

}  // namespace hspmd::graph
