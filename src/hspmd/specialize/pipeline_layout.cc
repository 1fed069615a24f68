#include "hspmd/specialize/pipeline_layout.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <unordered_set>

#include "hspmd/core/error.h"
#include "hspmd/sharding/device_group.h"

namespace hspmd::specialize {

using graph::Graph;
using graph::Op;
using graph::OpKind;
using graph::TensorRef;
using sharding::Annotation;

std::pair<int, int> PipelineLayout::locate(int rank) const {
  for (size_t p = 0; p < pipelines.size(); ++p) {
    const auto& stages = pipelines[p].stages;
    for (size_t s = 0; s < stages.size(); ++s) {
      if (std::binary_search(stages[s].begin(), stages[s].end(), rank)) {
        return {static_cast<int>(p), static_cast<int>(s)};
      }
    }
  }
  HSPMD_THROW() << "rank " << rank << " is in no pipeline stage of the layout:\n" << to_string();
}

std::string PipelineLayout::to_string() const {
  std::ostringstream out;
  for (size_t p = 0; p < pipelines.size(); ++p) {
    out << "pipeline " << p << ":";
    const auto& stages = pipelines[p].stages;
    for (size_t s = 0; s < stages.size(); ++s) {
      out << (s ? " -> [" : " [");
      for (size_t i = 0; i < stages[s].size(); ++i) out << (i ? "," : "") << stages[s][i];
      out << "]";
    }
    out << "\n";
  }
  return out.str();
}

namespace {

// Union-find over device ids: the stages being merged.
class Stages {
 public:
  void add(int d) {
    if (d >= static_cast<int>(parent_.size())) {
      const size_t old = parent_.size();
      parent_.resize(d + 1);
      std::iota(parent_.begin() + static_cast<std::ptrdiff_t>(old), parent_.end(), static_cast<int>(old));
      used_.resize(d + 1, false);
    }
    used_[d] = true;
  }
  int root(int d) {
    while (parent_[d] != d) d = parent_[d] = parent_[parent_[d]];
    return d;
  }
  void merge(const std::vector<int>& devices) {
    for (int d : devices) add(d);
    for (size_t i = 1; i < devices.size(); ++i) {
      const int a = root(devices[0]), b = root(devices[i]);
      if (a != b) parent_[std::max(a, b)] = std::min(a, b);  // root = lowest rank of the stage
    }
  }
  // root -> ranks ascending.
  std::map<int, std::vector<int>> groups() {
    std::map<int, std::vector<int>> out;
    for (int d = 0; d < static_cast<int>(parent_.size()); ++d) {
      if (used_[d]) out[root(d)].push_back(d);
    }
    return out;
  }

 private:
  std::vector<int> parent_;
  std::vector<bool> used_;
};

bool is_leaf(OpKind kind) {
  return kind == OpKind::kPlaceholder || kind == OpKind::kParameter || kind == OpKind::kFull;
}

std::string ranks_text(const std::vector<int>& ranks) { return sharding::DeviceGroup(ranks).to_string(); }

// Pairs (source subgroup, destination subgroup) whose devices exchange data: subgroup g with g
// when the hsize is kept (each pipeline hands over its own part), every pair otherwise.
std::vector<std::pair<int, int>> group_pairs(const Annotation& src, const Annotation& dst) {
  std::vector<std::pair<int, int>> out;
  if (src.hsize() == dst.hsize()) {
    for (int g = 0; g < src.hsize(); ++g) out.emplace_back(g, g);
  } else {
    for (int a = 0; a < src.hsize(); ++a) {
      for (int b = 0; b < dst.hsize(); ++b) out.emplace_back(a, b);
    }
  }
  return out;
}

// Every device of `to` is in `from`.
bool within(const sharding::DeviceGroup& to, const sharding::DeviceGroup& from) {
  return std::all_of(to.devices().begin(), to.devices().end(), [&](int d) { return from.contains(d); });
}

}  // namespace

std::vector<bool> ops_on_data(const Graph& g) {
  std::vector<bool> on_data(g.num_ops(), false);
  for (int id = 0; id < g.num_ops(); ++id) {
    const Op& op = g.op(id);
    on_data[id] = op.kind == OpKind::kPlaceholder;
    for (const TensorRef& in : op.inputs) on_data[id] = on_data[id] || on_data[in.op];
  }
  return on_data;
}

PipelineLayout build_pipeline_layout(const Graph& g, const graph::DeducedAnnotations& deduced) {
  // Reshards of tensors that depend on no placeholder (e.g. a tied weight moved to the last
  // stage) run once per step in Pre, not per micro-batch: they do not chain stages (A.2).
  const std::vector<bool> on_data = ops_on_data(g);
  std::vector<int> reshards;  // forward Reshards on data, in graph order
  Stages stages;
  // Ops share their device groups (a layer's ops, a stage's layers): each group is added or merged
  // once, not once per op, which at thousands of ranks was a pass over every rank per op.
  std::unordered_set<sharding::DeviceGroup, sharding::DeviceGroupHash> added, merged;
  for (int id = 0; id < g.num_ops(); ++id) {
    const Op& op = g.op(id);
    if (op.backward || is_leaf(op.kind)) continue;
    if (op.kind == OpKind::kReshard) {
      if (on_data[id]) reshards.push_back(id);
      for (const sharding::DeviceGroup& group : deduced.at(TensorRef{id, 0}).dg_union()) {
        if (!added.insert(group).second) continue;
        for (int d : group.devices()) stages.add(d);
      }
      continue;
    }
    // A compute op runs as one SPMD program per sharding subgroup: its devices share collectives.
    for (const Annotation& a : deduced.by_op()[id]) {
      for (const sharding::DeviceGroup& group : a.dg_union()) {
        if (merged.insert(group).second) stages.merge(group.devices());
      }
    }
  }
  // A Reshard whose source and destination subgroup are the same devices is a collective inside a
  // stage (TP all-reduce): merge. Done before any edge so every edge joins final stages.
  for (int id : reshards) {
    const Annotation& src = deduced.at(g.op(id).inputs[0]);
    const Annotation& dst = deduced.at(TensorRef{id, 0});
    for (auto [a, b] : group_pairs(src, dst)) {
      if (src.group(a).size() == dst.group(b).size() && within(dst.group(b), src.group(a))) {
        stages.merge(dst.group(b).devices());
      }
    }
  }
  // A destination subgroup with a device outside its source subgroup is fed point to point: the
  // source's stage precedes the destination's. One inside its source (every destination device
  // already holds the data, e.g. a pipeline-wide placeholder narrowed to a stage) adds nothing.
  std::map<int, std::pair<int, int>> next, prev;  // stage root -> (stage root, op id of the edge)
  for (int id : reshards) {
    const Op& op = g.op(id);
    const Annotation& src = deduced.at(op.inputs[0]);
    const Annotation& dst = deduced.at(TensorRef{id, 0});
    for (auto [a, b] : group_pairs(src, dst)) {
      const std::vector<int>& to = dst.group(b).devices();
      if (within(dst.group(b), src.group(a))) continue;
      const int s = stages.root(src.group(a)[0]), t = stages.root(to[0]);
      if (s == t) continue;  // point to point inside one stage (e.g. a context-parallel exchange)
      for (auto [map, key, value, what] : {std::tuple{&next, s, t, "successors"}, std::tuple{&prev, t, s, "predecessors"}}) {
        auto [it, fresh] = map->emplace(key, std::pair{value, id});
        HSPMD_CHECK(fresh || it->second.first == value)
            << "pipeline construction: Reshard '" << op.name << "' (" << src.to_string() << " -> " << dst.to_string()
            << ") gives the stage of rank " << key << " two " << what << ": the stages of ranks " << it->second.first
            << " (from Reshard '" << g.op(it->second.second).name << "') and " << value
            << "; the strategy's stages must form chains";
      }
    }
  }
  std::map<int, std::vector<int>> groups = stages.groups();
  PipelineLayout layout;
  std::set<int> placed;
  for (const auto& [root, ranks] : groups) {
    if (prev.count(root)) continue;  // not a chain head
    PipelineStages p;
    for (int s = root;;) {
      placed.insert(s);
      p.stages.push_back(groups.at(s));
      auto it = next.find(s);
      if (it == next.end()) break;
      s = it->second.first;
    }
    layout.pipelines.push_back(std::move(p));
  }
  for (const auto& [root, ranks] : groups) {
    // Every stage on a cycle has a predecessor, so no chain head reaches it.
    HSPMD_CHECK(placed.count(root))
        << "pipeline construction: Reshard '" << g.op(prev.at(root).second).name << "' closes a cycle of stages through "
        << ranks_text(ranks) << "; a pipeline's stages must form a chain";
  }
  auto lowest = [](const PipelineStages& p) {
    int m = p.stages[0][0];
    for (const auto& s : p.stages) m = std::min(m, s[0]);
    return m;
  };
  std::sort(layout.pipelines.begin(), layout.pipelines.end(),
            [&](const PipelineStages& a, const PipelineStages& b) { return lowest(a) < lowest(b); });
  return layout;
}

}  // namespace hspmd::specialize
