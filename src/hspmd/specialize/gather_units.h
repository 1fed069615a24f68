// ZeRO-3's gather units (sharding::AnnotationPlan::shard_parameters) and when a pass gathers and
// frees them. A unit is the parameters under "model.layers.<i>." (Hugging Face names), or one
// parameter outside the layers (the embedding, the final norm, the head). In a pass (an op
// sequence), unit u is all-gathered before position gather_at: its first reader, or earlier, the
// last reader of the unit before it (prefetched one layer ahead, while that layer finishes); each
// parameter is freed after its own last reader. The runtime follows this schedule
// (runtime/parameter_gathers.h) and the memory estimate takes its peak (peak_gathered_bytes).
//
//   std::vector<GatherUnit> f = forward_gather_units(exec);
//   f[0].layer == "model.embed_tokens.weight"; f[1].layer == "model.layers.0"; f[1].gather_at ...
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hspmd/specialize/exec_graph.h"

namespace hspmd::specialize {

struct GatherUnit {
  std::string layer;            // "model.layers.3", or a parameter's name outside the layers
  std::vector<int> params;      // parameter op ids this rank holds, in the order the pass first reads them
  std::vector<int> last_reads;  // per parameter: the position of its last reader
  int first = 0, last = 0;      // positions of the unit's first and last reader
  int gather_at = 0;            // gathered before this position (<= first)
};

// The layer a parameter is gathered with: "model.layers.<i>" for a name under it, else the name.
std::string gather_layer(const std::string& param_name);

// The units of the parameters this rank holds that the ops `ops` (a pass, in order) read, ordered
// by their first reader.
std::vector<GatherUnit> gather_units(const ExecGraph& exec, const std::vector<int>& ops);
// The same for F (forward_ops()) and for B as run (backward_steps(), with what recompute replays).
std::vector<GatherUnit> forward_gather_units(const ExecGraph& exec);
std::vector<GatherUnit> backward_gather_units(const ExecGraph& exec);

// The most bytes the schedule above holds gathered at once (`bytes_of`: a parameter op's whole size
// in the layout the pass reads).
int64_t peak_gathered_bytes(const std::vector<GatherUnit>& units, const std::function<int64_t(int op)>& bytes_of);

}  // namespace hspmd::specialize
