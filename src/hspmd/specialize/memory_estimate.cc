#include "hspmd/specialize/memory_estimate.h"

#include <algorithm>

#include "hspmd/core/byte_size.h"
#include "hspmd/core/dtype.h"
#include "hspmd/kernels/lm_head_loss.h"
#include "hspmd/specialize/gather_units.h"

namespace hspmd::specialize {

std::string MemoryEstimate::to_string() const {
  return format_bytes(parameters) + " parameters + " + format_bytes(gradients) + " gradients + " +
         format_bytes(optimizer_states) + " optimizer states + " + format_bytes(activations) + " activations = " +
         format_bytes(total());
}

MemoryEstimate estimate_memory(const ExecGraph& exec, const MemoryEstimateOptions& options) {
  const graph::Graph& g = exec.graph();
  MemoryEstimate m;
  int64_t whole_gradients = 0;    // the parameter layout's bytes
  int64_t state_bytes_total = 0;  // the optimizer-state layout's
  for (int id : exec.parameters()) {
    const graph::TensorRef ref{id, 0};
    const graph::TensorInfo& info = g.info(ref);
    const int64_t bytes = exec.local_shape(ref, {}).numel() * static_cast<int64_t>(dtype_size(info.dtype));
    const Shape shape = evaluate(info.shape, {});
    // The state's shard, located in place: building the annotation without_zero per parameter
    // copied its device groups for every parameter of every rank.
    const sharding::Annotation& state = exec.plan().optimizer_state(g.op(id).name);
    int64_t state_numel = 1;  // a rank outside the state's groups: a scalar, as before
    if (const auto where = state.locate(exec.rank())) {
      const auto [group, index] = *where;
      state_numel = state.ds(group).with_zero(false).region(index, state.group_part(group, shape)).numel();
    }
    const int64_t state_bytes = state_numel * static_cast<int64_t>(dtype_size(info.dtype));
    m.parameters += bytes;
    m.gradients += bytes + state_bytes;
    whole_gradients += bytes;
    state_bytes_total += state_bytes;
    m.optimizer_states += 2 * state_bytes;
  }
  const SymBinding binding{{"T", options.micro_batch_tokens}, {"N", 1}};
  int64_t saved = 0, transient = 0;
  for (int id : exec.forward_ops()) {
    const graph::Op& op = g.op(id);
    for (int i = 0; i < static_cast<int>(op.outputs.size()); ++i) {
      const graph::TensorRef t{id, i};
      if (!exec.holds(t)) continue;
      const int64_t bytes =
          exec.local_shape(t, binding).numel() * static_cast<int64_t>(dtype_size(op.outputs[i].dtype));
      (exec.saved_for_backward(t) ? saved : transient) += bytes;
    }
    // The fused head's logits are no output: its scratch of one chunk of them is.
    if (op.kind == graph::OpKind::kLmHeadLoss && exec.holds(op.inputs[1])) {
      const int64_t tokens = exec.local_shape(op.inputs[0], binding).dim(0);
      const int64_t vocab = exec.local_shape(op.inputs[1], binding).dim(0);
      transient += kernels::lm_head_loss_chunk_rows(tokens, vocab) * vocab *
                   static_cast<int64_t>(dtype_size(g.info(op.inputs[0]).dtype));
    }
  }
  m.activations = saved * options.micro_batches_in_flight + transient;
  const sharding::AnnotationPlan& plan = exec.plan();
  if (plan.shard_parameters) {
    // ZeRO-3 keeps the state shard of values and gradients. A pass holds what its gather schedule
    // holds at most (the layer it runs and the next one, each parameter freed after its last
    // reader); B holds one parameter's whole gradient, or two at most when the communication thread
    // reduces one into the shard while B computes the next.
    auto bytes_of = [&](int id) {
      return exec.local_shape({id, 0}, {}).numel() * static_cast<int64_t>(dtype_size(g.info({id, 0}).dtype));
    };
    int64_t largest = 0;
    for (int id : exec.parameters()) largest = std::max(largest, bytes_of(id));
    m.parameters = state_bytes_total + std::max(peak_gathered_bytes(forward_gather_units(exec), bytes_of),
                                                peak_gathered_bytes(backward_gather_units(exec), bytes_of));
    m.gradients = state_bytes_total + (options.gradients_reduced_on_a_thread ? 2 : 1) * largest;
    return m;
  }
  // ZeRO-2 keeps no whole gradient between backward passes when each of this rank's micro-batches is
  // a group of its own (runtime/gradient_sync.h): the whole gradient then lives only during one
  // backward pass, when no forward value dies within a forward pass, so it counts only beyond those.
  if (plan.shard_gradients && !plan.pipelines.empty() && exec.data_group() >= 0) {
    int fewest = plan.pipelines.front().num_micro_batches;
    for (const sharding::PipelineSchedule& p : plan.pipelines) fewest = std::min(fewest, p.num_micro_batches);
    if (fewest >= plan.pipelines.at(exec.data_group()).num_micro_batches) {
      m.gradients += std::max<int64_t>(0, whole_gradients - transient) - whole_gradients;
    }
  }
  return m;
}

}  // namespace hspmd::specialize
