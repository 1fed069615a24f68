#include "hspmd/planner/pipeline_search.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "hspmd/core/error.h"

namespace hspmd::planner {

std::vector<int> powers_of_two_dividing(int64_t n, int64_t up_to) {
  std::vector<int> out;
  for (int64_t b = 1; b <= up_to && b <= n; b *= 2) {
    if (n % b == 0) out.push_back(static_cast<int>(b));
  }
  return out;
}

double layer_seconds(const CostModel& cost, const Group& g, int b) {
  return cost.stage_compute(g.kind, static_cast<int>(g.ranks.size()), 1, false, b) +
         cost.stage_tp_comm(g.ranks, 1, b);
}

PipelineSearch::PipelineSearch(const CostModel& c, const PlannerOptions& o, const std::vector<int>& available)
    : cost(c),
      options(o),
      shape(c.shape()),
      layers(static_cast<int>(c.shape().layers)),
      num_devices(static_cast<int>(available.size())) {
  for (int r : available) {
    const resolve::DeviceSpec& d = cost.topology().device(r);
    devices[d.type][d.node].push_back(r);
  }
  for (auto& [kind, nodes] : devices) {
    for (auto& [node, ranks] : nodes) std::sort(ranks.begin(), ranks.end());
  }
}

// The ways to spread each kind's groups over D pipelines as evenly as possible: G / D each, and
// G % D pipelines with one more. Every choice of those pipelines while the combinations are few
// (small clusters: the search is complete there); otherwise one rotation, so that extras of
// different kinds land on different pipelines.
std::vector<std::map<std::string, std::vector<int>>> PipelineSearch::spreads(
    const std::vector<std::string>& used, const std::map<std::string, std::vector<Group>>& groups, int D) const {
  // Up to 8 devices every spread is tried (the search is complete); above, at most 16 per count.
  const size_t kMaxSpreads = num_devices <= 8 ? std::numeric_limits<size_t>::max() : 16;
  std::vector<std::map<std::string, std::vector<int>>> out{{}};
  int offset = 0;
  bool complete = true;
  for (const std::string& kind : used) {
    const int G = static_cast<int>(groups.at(kind).size());
    const int extra = G % D;
    // Subsets of `extra` pipelines out of D.
    std::vector<std::vector<int>> options;
    std::vector<int> mask(D, 0);
    std::fill(mask.begin(), mask.begin() + extra, 1);
    std::sort(mask.begin(), mask.end());
    do {
      std::vector<int> c(D, G / D);
      for (int p = 0; p < D; ++p) c[p] += mask[p];
      options.push_back(c);
    } while (std::next_permutation(mask.begin(), mask.end()) && options.size() <= kMaxSpreads);
    if (options.size() > kMaxSpreads || out.size() * options.size() > kMaxSpreads) complete = false;
    if (!complete) {
      std::vector<int> c(D, G / D);
      for (int e = 0; e < extra; ++e) ++c[(offset + e) % D];
      options = {c};
    }
    offset = (offset + extra) % D;
    std::vector<std::map<std::string, std::vector<int>>> next;
    for (const auto& partial : out) {
      for (const auto& c : options) {
        auto m = partial;
        m[kind] = c;
        next.push_back(std::move(m));
      }
    }
    out = std::move(next);
  }
  return out;
}

bool PipelineSearch::tp_allowed(const std::string& kind, int t) const {
  return shape.tp_divides(t) && cost.profile().has(kind, t);
}

std::vector<Group> PipelineSearch::groups_of(const std::string& kind, int t) const {
  std::vector<Group> out;
  for (const auto& [node, ranks] : devices.at(kind)) {
    for (size_t i = 0; i + t <= ranks.size(); i += t) {
      out.push_back({kind, node, std::vector<int>(ranks.begin() + i, ranks.begin() + i + t)});
    }
  }
  return out;
}

// The micro-batch sizes of the pipelines: every assignment with room for one micro-batch per
// pipeline (sum_p b_p <= the global batch). Above 8 devices, pipelines of equal kinds and TP
// degrees share a size (they are interchangeable), sizes differ at most 2x, and a kind mixing TP
// degrees (mixed_tp) runs one size in every pipeline: the candidates stay few.
std::vector<std::vector<int>> PipelineSearch::size_assignments(const std::vector<std::vector<Group>>& pipes,
                                                               const std::vector<int>& sizes, bool mixed_tp) const {
  const int D = static_cast<int>(pipes.size());
  std::vector<int> cls(D);  // pipeline -> class of pipelines that share a size
  std::map<std::vector<std::pair<std::string, size_t>>, int> class_of;
  for (int p = 0; p < D; ++p) {
    if (num_devices <= 8) {
      cls[p] = p;
      continue;
    }
    std::vector<std::pair<std::string, size_t>> signature;
    for (const Group& g : pipes[p]) signature.push_back({g.kind, g.ranks.size()});
    cls[p] = mixed_tp ? 0 : class_of.emplace(signature, static_cast<int>(class_of.size())).first->second;
  }
  const int classes = *std::max_element(cls.begin(), cls.end()) + 1;
  std::vector<std::vector<int>> out;
  std::vector<size_t> pick(classes, 0);
  while (true) {
    std::vector<int> bs(D);
    int64_t sum = 0;
    for (int p = 0; p < D; ++p) sum += bs[p] = sizes[pick[cls[p]]];
    const auto [least, most] = std::minmax_element(bs.begin(), bs.end());
    if (sum <= options.global_batch && (num_devices <= 8 || *most <= 2 * *least)) out.push_back(bs);
    int k = 0;
    while (k < classes && ++pick[k] == sizes.size()) pick[k++] = 0;
    if (k == classes) break;
  }
  return out;
}

// The ways to cut a kind's devices into TP groups: every allowed degree t alone (groups_of), and
// two degrees t_small < t_big: the first k groups of t_big (node by node), the rest of the devices
// in groups of t_small. Up to 8 devices every pair and every k; above, t_big = 2 t_small and whole
// nodes of t_big only, which keeps the candidates few.
std::vector<std::vector<Group>> PipelineSearch::mixes_of(const std::string& kind) const {
  std::vector<int> degrees;
  int largest_node = 0;
  for (const auto& [node, ranks] : devices.at(kind)) largest_node = std::max(largest_node, static_cast<int>(ranks.size()));
  for (int t = 1; t <= largest_node; t *= 2) {
    if (tp_allowed(kind, t) && (!keep_tp.count(kind) || keep_tp.at(kind).count(t))) degrees.push_back(t);
  }
  std::vector<std::vector<Group>> out;
  for (int t : degrees) {
    std::vector<Group> g = groups_of(kind, t);
    if (!g.empty()) out.push_back(std::move(g));
  }
  const bool small = num_devices <= 8;
  for (size_t i = 0; i < degrees.size(); ++i) {
    for (size_t j = i + 1; j < degrees.size(); ++j) {
      const int t_small = degrees[i], t_big = degrees[j];
      if (!small && t_big != 2 * t_small) continue;
      const int most = static_cast<int>(groups_of(kind, t_big).size());
      for (int k = 1; k < most; ++k) {
        std::vector<Group> mix;
        int taken = 0;
        bool whole_nodes = true;
        for (const auto& [node, ranks] : devices.at(kind)) {
          size_t at = 0;
          for (; taken < k && at + t_big <= ranks.size(); at += t_big, ++taken) {
            mix.push_back({kind, node, std::vector<int>(ranks.begin() + at, ranks.begin() + at + t_big)});
          }
          if (at > 0 && at + t_big <= ranks.size()) whole_nodes = false;
          for (; at + t_small <= ranks.size(); at += t_small) {
            mix.push_back({kind, node, std::vector<int>(ranks.begin() + at, ranks.begin() + at + t_small)});
          }
        }
        if (small || whole_nodes) out.push_back(std::move(mix));
      }
    }
  }
  return out;
}

namespace {

// The device kinds of classes of groups.
std::set<std::string> kinds_of(const std::map<std::string, std::vector<Group>>& groups) {
  std::set<std::string> out;
  for (const auto& [cls, g] : groups) out.insert(g.front().kind);
  return out;
}

// Whether the classes of each kind are next to each other in `order`.
bool kinds_contiguous(const std::vector<std::string>& order, const std::map<std::string, std::vector<Group>>& groups) {
  std::set<std::string> seen;
  for (size_t i = 0; i < order.size(); ++i) {
    const std::string& kind = groups.at(order[i]).front().kind;
    if ((i == 0 || groups.at(order[i - 1]).front().kind != kind) && !seen.insert(kind).second) return false;
  }
  return true;
}

}  // namespace

std::vector<Candidate> PipelineSearch::candidates() const {
  const bool small = num_devices <= 8;  // the search is complete up to 8 devices
  std::vector<std::string> kinds;
  std::vector<std::vector<std::vector<Group>>> mixes;  // per kind: its mixes (idle not listed)
  for (const auto& [kind, _] : devices) {
    kinds.push_back(kind);
    mixes.push_back(mixes_of(kind));
  }
  const std::vector<int> sizes = !keep_micro_batch_sizes.empty() ? keep_micro_batch_sizes
                                 : options.micro_batch_sizes.empty()
                                     ? powers_of_two_dividing(options.global_batch, 8)
                                     : options.micro_batch_sizes;
  std::vector<Candidate> out;
  std::vector<int> pick(kinds.size(), -1);  // per kind: its mix, or -1 = idle
  std::function<void(const std::vector<std::string>&, std::map<std::string, std::vector<Group>>&,
                     const std::map<std::string, std::vector<int>>&, int)>
      add;
  std::function<void(size_t)> recurse = [&](size_t k) {
    if (k < kinds.size()) {
      for (int m = -1; m < static_cast<int>(mixes[k].size()); ++m) {
        pick[k] = m;
        recurse(k + 1);
      }
      return;
    }
    // Classes: the groups of one kind and one TP degree ("H800/TP4"), each spread evenly.
    std::vector<std::string> used;
    std::map<std::string, std::vector<Group>> groups;
    int total = 0;
    for (size_t i = 0; i < kinds.size(); ++i) {
      if (pick[i] < 0) continue;
      for (const Group& g : mixes[i][pick[i]]) {
        groups[kinds[i] + "/TP" + std::to_string(g.ranks.size())].push_back(g);
        ++total;
      }
    }
    for (const auto& [cls, _] : groups) used.push_back(cls);
    if (used.empty()) return;
    // Above 8 devices, at most one kind mixes TP degrees.
    if (!small && used.size() > kinds_of(groups).size() + 1) return;
    for (int D = 1; D <= total; ++D) {
      for (const auto& count : spreads(used, groups, D)) {
        bool ok = true;
        for (int p = 0; p < D && ok; ++p) {
          int stages = 0;
          for (const std::string& kind : used) stages += count.at(kind)[p];
          ok = stages >= 1 && stages <= layers;
        }
        if (ok) add(used, groups, count, D);
      }
    }
  };
  // Every order of the classes along the pipelines, every micro-batch size.
  add = [&](const std::vector<std::string>& used, std::map<std::string, std::vector<Group>>& groups,
            const std::map<std::string, std::vector<int>>& count, int D) {
    std::vector<std::string> order = used;
    std::sort(order.begin(), order.end());
    const bool mixed = used.size() > kinds_of(groups).size();
    do {
      // Above 8 devices, the classes of one kind stay together along the pipelines.
      if (!small && !kinds_contiguous(order, groups)) continue;
      std::vector<std::vector<Group>> pipes(D);
      std::map<std::string, size_t> next;
      for (int p = 0; p < D; ++p) {
        for (const std::string& kind : order) {
          for (int i = 0; i < count.at(kind)[p]; ++i) pipes[p].push_back(groups[kind][next[kind]++]);
        }
      }
      for (const std::vector<int>& bs : size_assignments(pipes, sizes, mixed)) {
        Candidate c;
        c.micro_batch_sizes = bs;
        c.pipelines = pipes;
        // Pipeline p needs at least (n_p + S_p - 1) * L / R_p, R_p = sum over its stages of
        // 1 / (seconds per layer at b_p): its slowest stage holds at least L / R_p of layer work per
        // micro-batch. Within a step time T it takes n_p <= T R_p / L - (S_p - 1) micro-batches, and
        // sum_p n_p b_p = B (the global batch), so T >= L (B + sum_p b_p (S_p - 1)) / sum_p b_p R_p,
        // a lower bound on the step.
        double rate = 0, bubbles = 0;
        for (size_t p = 0; p < pipes.size(); ++p) {
          double r = 0;
          for (const Group& g : pipes[p]) r += 1.0 / layer_seconds(cost, g, bs[p]);
          rate += bs[p] * r;
          bubbles += bs[p] * (static_cast<double>(pipes[p].size()) - 1);
        }
        c.bound = (static_cast<double>(options.global_batch) + bubbles) * layers / rate;
        out.push_back(std::move(c));
      }
    } while (std::next_permutation(order.begin(), order.end()));
  };
  recurse(0);
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) { return a.bound < b.bound; });
  return out;
}

}  // namespace hspmd::planner
