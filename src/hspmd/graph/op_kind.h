// Every kind of operator a defined graph may hold. Each kind has exactly one registry entry
// (graph/op_registry.h) with its shape rule, gradient builder and deduction rule (its kernels are
// in graph/kernel_registry.h); the registry is built by a switch over this enum, so adding a kind
// without an entry fails to compile (-Wswitch, part of -Wall, with no default label).
//
// Forward kinds:                backward kinds they emit:
//   kEmbedding                    kEmbeddingBwd
//   kRmsNorm  (y, rstd)           kRmsNormBwd (dx, dweight)
//   kMatmul                       kMatmul (transposed operands)
//   kRope                         kRopeBwd
//   kAttention (out, lse)         kAttentionBwd (dq, dk, dv)
//   kContextAttention (out, lse)  kContextAttentionBwd (dq, dk, dv)
//   kSwiglu                       kSwigluBwd (dgate, dup)
//   kAdd                          (passes the gradient through; kAdd accumulates gradients)
//   kReshape                      kReshape
//   kReshard                      kReshard (named "<name>.bwd")
//   kCrossEntropy (loss, lse)     kCrossEntropyBwd
//   kLmHeadLoss (loss, lse)       kLmHeadLossBwd (dx, dw)   (the head's matmul and cross_entropy in one)
//   kBiasAdd                      kBiasAddBwd (dbias)
//   kGegluTanh                    kGegluTanhBwd (dgate, dup)   (Gemma's MLP activation)
//   kScale                        kScale (the same factor)
// Leaves: kPlaceholder (fed per run), kParameter (trained), kFull (a constant, e.g. the seed 1.0
// of d loss / d loss).
#pragma once

#include <cstdint>
#include <string_view>

namespace hspmd::graph {

enum class OpKind : uint8_t {
  kPlaceholder,
  kParameter,
  kFull,
  kEmbedding,
  kEmbeddingBwd,
  kRmsNorm,
  kRmsNormBwd,
  kMatmul,
  kRope,
  kRopeBwd,
  kAttention,
  kAttentionBwd,
  kSwiglu,
  kSwigluBwd,
  kAdd,
  kReshape,
  kReshard,
  kCrossEntropy,
  kCrossEntropyBwd,
  kBiasAdd,
  kBiasAddBwd,
  kContextAttention,
  kContextAttentionBwd,
  kLmHeadLoss,
  kLmHeadLossBwd,
  kGegluTanh,
  kGegluTanhBwd,
  kScale,
};
inline constexpr int kNumOpKinds = static_cast<int>(OpKind::kScale) + 1;

// Canonical snake_case name ("rms_norm_bwd"), as used in logs, dumps and error messages.
std::string_view op_kind_name(OpKind kind);

}  // namespace hspmd::graph
