#include "hspmd/planner/memory_fit.h"

#include <algorithm>
#include <memory>

#include "hspmd/planner/cost_model.h"
#include "hspmd/specialize/exec_graph.h"
#include "hspmd/specialize/memory_estimate.h"

namespace hspmd::planner {

namespace {

struct MemoryPoint {
  double states = 0, activations = 0;
};

MemoryPoint estimate(const models::Model& model, int tp, int layers, int64_t tokens, int in_flight, int pipelines,
                     bool zero1) {
  const std::shared_ptr<const models::Model> sized = model.with_num_layers(layers);
  const models::ModelGraph g = sized->build({});
  const sharding::AnnotationPlan plan = sized->compile_plan(single_stage_strategy(tp, layers, 1, pipelines, zero1));
  const specialize::ExecGraph exec(g.graph, plan, 0);
  const specialize::MemoryEstimate m =
      specialize::estimate_memory(exec, {.micro_batch_tokens = tokens, .micro_batches_in_flight = in_flight});
  return {static_cast<double>(m.parameters + m.gradients + m.optimizer_states), static_cast<double>(m.activations)};
}

}  // namespace

sharding::Strategy single_stage_strategy(int tp, int layers, int micro_batch_size, int pipelines, bool zero1,
                                         int micro_batches) {
  sharding::Strategy st;
  st.name = "profile";
  st.zero = zero1 ? 1 : 0;
  for (int p = 0; p < pipelines; ++p) {
    sharding::PipelineSpec pipe;
    pipe.micro_batch_size = micro_batch_size;
    pipe.num_micro_batches = micro_batches;
    sharding::StageSpec s;
    for (int r = 0; r < tp; ++r) s.ranks.push_back(p * tp + r);
    s.first_layer = 0;
    s.last_layer = layers - 1;
    pipe.stages.push_back(s);
    st.pipelines.push_back(pipe);
  }
  return st;
}

ActivationFit fit_activations(const models::Model& model, int t) {
  ActivationFit a;
  const int64_t T1 = 128, T2 = 256;
  auto act = [&](int layers, int64_t tokens, int k) {
    return estimate(model, t, layers, tokens, k, 1, false).activations;
  };
  auto keep = [&](int layers, int64_t tokens) { return act(layers, tokens, 2) - act(layers, tokens, 1); };
  const double d1 = keep(2, T1) - keep(1, T1), d2 = keep(2, T2) - keep(1, T2);
  // d = alpha T + alpha2 T^2 at T1 and T2.
  const double alpha2 = (d2 / T2 - d1 / T1) / static_cast<double>(T2 - T1);
  const double alpha = d1 / T1 - alpha2 * T1;
  a.keep_per_token = std::max(0.0, alpha);
  a.keep_per_token2 = std::max(0.0, alpha2);
  a.ends_keep_per_token = std::max(0.0, (keep(1, T1) - d1) / T1);
  const double tr1 = act(1, T1, 1) - keep(1, T1), tr2 = act(2, T1, 1) - keep(2, T1);
  a.transient_per_token = std::max(0.0, (tr2 - tr1) / T1);
  a.ends_transient_per_token = std::max(0.0, (tr1 - (tr2 - tr1)) / T1);
  return a;
}

void fit_state_bytes(const models::Model& model, int t, DeviceKindProfile& kind) {
  const int64_t T1 = 128;
  const double n = ModelShape::of(model).stage_parameters(1, true, true) / t;
  const double plain = estimate(model, t, 1, T1, 1, 1, false).states;
  const double zero = estimate(model, t, 1, T1, 1, 2, true).states;
  kind.zero_bytes_per_parameter = 2 * (plain - zero) / n;
  kind.bytes_per_parameter = plain / n - kind.zero_bytes_per_parameter;
}

}  // namespace hspmd::planner
