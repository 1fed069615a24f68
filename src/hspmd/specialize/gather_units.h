// ZeRO-3's gather units (sharding::AnnotationPlan::shard_parameters) and when a pass gathers and
// frees them. A unit is the parameters under "model.layers.<i>." (Hugging Face names), or one
// parameter outside the layers (the embedding, the final norm, the head). In a pass (an op
// sequence), unit u is all-gathered from position gather_at on: its first reader, or earlier, the
// last reader of the unit before it (prefetched one layer ahead: the runtime hands the gather to
// its communication thread there and waits for it only at u's first reader, so it runs while that
// layer finishes); each parameter is freed after its own last reader. The runtime follows this
// schedule (runtime/parameter_gathers.h) and the memory estimate takes its peak
// (peak_gathered_bytes: a unit counts from gather_at, where its gather may allocate).
//
//   std::vector<GatherUnit> f = forward_gather_units(exec);
//   f[0].layer == "model.embed_tokens.weight"; f[1].layer == "model.layers.0"; f[1].gather_at ...
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "hspmd/specialize/exec_graph.h"
#include "hspmd/specialize/pipeline_layout.h"
#include "hspmd/specialize/schedule.h"

namespace hspmd::specialize {

struct GatherUnit {
  std::string layer;            // "model.layers.3", or a parameter's name outside the layers
  std::vector<int> params;      // parameter op ids this rank holds, in the order the pass first reads them
  std::vector<int> last_reads;  // per parameter: the position of its last reader
  int first = 0, last = 0;      // positions of the unit's first and last reader
  int gather_at = 0;            // gathered from before this position on (<= first)
};

// The layer a parameter is gathered with: "model.layers.<i>" for a name under it, else the name.
std::string gather_layer(const std::string& param_name);

// The units of the parameters this rank holds that the ops `ops` (a pass, in order) read, ordered
// by their first reader. `reduced_after`: per parameter op, the position after which the pass
// reduces its gradient (B); a unit is then gathered only after the unit before it has reduced all
// its gradients, when its first reader allows (below).
std::vector<GatherUnit> gather_units(const ExecGraph& exec, const std::vector<int>& ops,
                                     const std::map<int, int>& reduced_after = {});
// The same for F (forward_ops()) and for B as run (backward_steps(), with what recompute replays).
// B hands each gradient to the reduction right after the op producing it (`params[i]`'s is
// `grads[i]`; without them, B's units are scheduled like F's, as the memory estimate does: an upper
// bound). Every holder of a parameter meets the others in its gathers and reduces, so each must do
// them in one order: a layer's gradient reduces before the next layer's gather (the runtime's
// communication thread runs both in the order they are handed over, the gradients before a gather
// due after them: runtime/bucketed_gradient_sync.h). Otherwise, over pipelines of
// other stage splits, a rank prefetching layer 0 while it reduces layer 1 waits for a rank of layer 0
// that waits for the gradient of a rank still reducing layer 1 with the first: a deadlock.
std::vector<GatherUnit> forward_gather_units(const ExecGraph& exec);
std::vector<GatherUnit> backward_gather_units(const ExecGraph& exec, const std::vector<graph::TensorRef>& params = {},
                                              const std::vector<graph::TensorRef>& grads = {});

// Every holder of a parameter gathers it (and reduces its gradient) once per pass, in lockstep with
// the others, over pipelines of any shape: their passes must come in one order. Throws Error naming
// `param`, two of its `holders` and their orders unless every holder's schedule under `kind` (its
// pipeline and stage in `pipelines`, each pipeline running `num_micro_batches`) is the same. GPipe
// always is; 1F1B when each layer sits as many stages before the end of every pipeline holding it.
void check_passes_in_lockstep(const PipelineLayout& pipelines, ScheduleKind kind, int num_micro_batches,
                              const std::string& param, const std::vector<int>& holders);

// The most bytes the schedule above holds gathered at once (`bytes_of`: a parameter op's whole size
// in the layout the pass reads).
int64_t peak_gathered_bytes(const std::vector<GatherUnit>& units, const std::function<int64_t(int op)>& bytes_of);

}  // namespace hspmd::specialize
