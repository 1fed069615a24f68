// The token losses of a graph as vocabulary parallelism sees them: cross_entropy over logits, and
// lm_head_loss, whose logits x @ w^T are formed inside the op and are never a tensor. Under a
// vocabulary split each rank normalizes its columns of a row with the statistics of the other
// shards; specialize::ExecGraph, the runtime and the plan report find those shards from here.
//
//   if (auto logits = loss_logits(g, op, [&](TensorRef t) { return deduced.at(t); })) {
//     logits->annotation;  // e.g. "S1:2" for a head split over 2 TP ranks
//     logits->vocab;       // V, the whole row's width
//   }
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "hspmd/graph/graph.h"
#include "hspmd/sharding/annotation.h"

namespace hspmd::graph {

struct LossLogits {
  sharding::Annotation annotation;  // of the logits [T, V]
  SymExpr vocab;                    // V
};

// For cross_entropy(_bwd) and lm_head_loss(_bwd) ops, their logits; nullopt for every other kind.
std::optional<LossLogits> loss_logits(const Graph& g, const Op& op,
                                      const std::function<sharding::Annotation(TensorRef)>& annotation_of);

// Forward token losses, the ops that gather the shards' row statistics (KernelContext::gather_vocab_shards).
bool gathers_vocab_shards(OpKind kind);

// The annotation of x @ w^T for x [T, H] and w [V, H] (matmul's rule); `label` names the op in errors.
sharding::Annotation lm_head_logits(const std::string& label, const sharding::Annotation& x,
                                    const sharding::Annotation& w);

}  // namespace hspmd::graph
