#include "hspmd/specialize/gather_units.h"

#include <algorithm>
#include <map>
#include <set>

#include "hspmd/core/error.h"

namespace hspmd::specialize {

std::string gather_layer(const std::string& param_name) {
  static const std::string kLayers = "model.layers.";
  if (param_name.rfind(kLayers, 0) != 0) return param_name;
  const size_t end = param_name.find('.', kLayers.size());
  return end == std::string::npos ? param_name : param_name.substr(0, end);
}

std::vector<GatherUnit> gather_units(const ExecGraph& exec, const std::vector<int>& ops,
                                     const std::map<int, int>& reduced_after) {
  const std::vector<int>& held = exec.parameters();
  const std::set<int> params(held.begin(), held.end());
  std::map<std::string, size_t> index;  // layer -> position in `units`
  std::vector<GatherUnit> units;        // in order of first reader: a unit is added at its first
  for (int k = 0; k < static_cast<int>(ops.size()); ++k) {
    for (graph::TensorRef in : exec.op(ops[k]).inputs) {
      if (!params.count(in.op)) continue;
      auto [it, added] = index.emplace(gather_layer(exec.graph().op(in.op).name), units.size());
      if (added) units.push_back({it->first, {}, {}, k, k, k});
      GatherUnit& u = units[it->second];
      u.last = k;
      const auto p = std::find(u.params.begin(), u.params.end(), in.op);
      if (p == u.params.end()) {
        u.params.push_back(in.op);
        u.last_reads.push_back(k);
      } else {
        u.last_reads[p - u.params.begin()] = k;
      }
    }
  }
  for (size_t u = 1; u < units.size(); ++u) {
    int after = units[u - 1].last - 1;  // before the previous unit's last reader
    for (int op : units[u - 1].params) {
      if (const auto r = reduced_after.find(op); r != reduced_after.end()) after = std::max(after, r->second);
    }
    units[u].gather_at = std::min(units[u].first, after + 1);
  }
  return units;
}

std::vector<GatherUnit> forward_gather_units(const ExecGraph& exec) { return gather_units(exec, exec.forward_ops()); }

std::vector<GatherUnit> backward_gather_units(const ExecGraph& exec, const std::vector<graph::TensorRef>& params,
                                              const std::vector<graph::TensorRef>& grads) {
  std::vector<int> ops;
  std::map<int, int> position;  // op id -> its position in B (the last, should recompute replay it)
  for (const ExecGraph::BackwardStep& step : exec.backward_steps()) {
    position[step.op] = static_cast<int>(ops.size());
    ops.push_back(step.op);
  }
  std::map<int, int> reduced_after;
  for (size_t i = 0; i < params.size() && i < grads.size(); ++i) {
    if (!grads[i].valid()) continue;
    if (const auto p = position.find(grads[i].op); p != position.end()) reduced_after[params[i].op] = p->second;
  }
  return gather_units(exec, ops, reduced_after);
}

void check_passes_in_lockstep(const PipelineLayout& pipelines, ScheduleKind kind, int num_micro_batches,
                              const std::string& param, const std::vector<int>& holders) {
  auto passes_of = [&](int rank) {
    const auto [pipeline, stage] = pipelines.locate(rank);
    const int stages = static_cast<int>(pipelines.pipelines[pipeline].stages.size());
    return std::pair{make_schedule(kind, num_micro_batches, stages, stage),
                     "rank " + std::to_string(rank) + " (pipeline " + std::to_string(pipeline) + ", stage " +
                         std::to_string(stage) + " of " + std::to_string(stages) + ")"};
  };
  if (holders.empty()) return;
  const auto [first, first_where] = passes_of(holders.front());
  for (size_t h = 1; h < holders.size(); ++h) {
    const auto [other, where] = passes_of(holders[h]);
    HSPMD_CHECK(other == first) << "ZeRO-3 gathers '" << param << "' once per pass on each of its holders, in "
                                << "lockstep, but under " << schedule_kind_name(kind) << " " << first_where
                                << " runs its passes as " << to_string(first) << " and " << where << " as "
                                << to_string(other) << "; use the gpipe schedule (one order on every stage) "
                                << "or \"zero\": 2";
  }
}

int64_t peak_gathered_bytes(const std::vector<GatherUnit>& units, const std::function<int64_t(int op)>& bytes_of) {
  // Gathered from gather_at to the parameter's last reader (inclusive): events at the positions.
  std::map<int, int64_t> change;  // position -> bytes gathered before it (+) or freed after it (-)
  std::map<int, int64_t> freed;
  for (const GatherUnit& u : units) {
    for (size_t i = 0; i < u.params.size(); ++i) {
      change[u.gather_at] += bytes_of(u.params[i]);
      freed[u.last_reads[i]] += bytes_of(u.params[i]);
    }
  }
  int64_t held = 0, peak = 0;
  std::set<int> positions;
  for (const auto& [k, b] : change) positions.insert(k);
  for (const auto& [k, b] : freed) positions.insert(k);
  for (int k : positions) {
    held += change.count(k) ? change[k] : 0;  // gathered before the op at k
    peak = std::max(peak, held);
    held -= freed.count(k) ? freed[k] : 0;  // freed after it
  }
  return peak;
}

}  // namespace hspmd::specialize
