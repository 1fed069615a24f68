#include "hspmd/specialize/gather_units.h"

#include <algorithm>
#include <map>
#include <set>

namespace hspmd::specialize {

std::string gather_layer(const std::string& param_name) {
  static const std::string kLayers = "model.layers.";
  if (param_name.rfind(kLayers, 0) != 0) return param_name;
  const size_t end = param_name.find('.', kLayers.size());
  return end == std::string::npos ? param_name : param_name.substr(0, end);
}

std::vector<GatherUnit> gather_units(const ExecGraph& exec, const std::vector<int>& ops) {
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
  for (size_t u = 1; u < units.size(); ++u) units[u].gather_at = std::min(units[u].first, units[u - 1].last);
  return units;
}

std::vector<GatherUnit> forward_gather_units(const ExecGraph& exec) { return gather_units(exec, exec.forward_ops()); }

std::vector<GatherUnit> backward_gather_units(const ExecGraph& exec) {
  std::vector<int> ops;
  for (const ExecGraph::BackwardStep& step : exec.backward_steps()) ops.push_back(step.op);
  return gather_units(exec, ops);
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
