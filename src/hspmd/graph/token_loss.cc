#include "hspmd/graph/token_loss.h"

#include "hspmd/sharding/deduce.h"

namespace hspmd::graph {

std::optional<LossLogits> loss_logits(const Graph& g, const Op& op,
                                      const std::function<sharding::Annotation(TensorRef)>& annotation_of) {
  switch (op.kind) {
    case OpKind::kCrossEntropy:
    case OpKind::kCrossEntropyBwd:
      return LossLogits{annotation_of(op.inputs[0]), g.info(op.inputs[0]).shape[1]};
    case OpKind::kLmHeadLoss:
    case OpKind::kLmHeadLossBwd:
      return LossLogits{lm_head_logits("op '" + op.name + "'", annotation_of(op.inputs[0]), annotation_of(op.inputs[1])),
                        g.info(op.inputs[1]).shape[0]};
    default:
      return std::nullopt;
  }
}

bool gathers_vocab_shards(OpKind kind) { return kind == OpKind::kCrossEntropy || kind == OpKind::kLmHeadLoss; }

sharding::Annotation lm_head_logits(const std::string& label, const sharding::Annotation& x,
                                    const sharding::Annotation& w) {
  return sharding::deduce_matmul(label, x, w, 2, /*trans_b=*/true);
}

}  // namespace hspmd::graph
