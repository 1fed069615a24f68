#include "hspmd/planner/pipeline_search.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "hspmd/core/error.h"

namespace hspmd::planner {

std::vector<int> powers_of_two_dividing(int64_t n, int64_t up_to) {
  std::vector<int> out;
  for (int64_t b = 1; b <= up_to && b <= n; b *= 2) {
    if (n % b == 0) out.push_back(static_cast<int>(b));
  }
  return out;
}

double layer_seconds(const CostModel& cost, const Group& g, int b, bool sequence_parallel) {
  const auto seconds = [&](bool sp) {
    return cost.stage_compute(g.kind, g.tp(), 1, false, b, g.cp, sp) + cost.stage_tp_comm(g.ranks, 1, b, g.cp, sp) +
           cost.stage_cp_comm(g.ranks, 1, b, g.cp);
  };
  return sequence_parallel && g.tp() > 1 ? std::min(seconds(true), seconds(false)) : seconds(false);
}

RingLinkBound ring_link_bound(const CostModel& cost, const std::vector<int>& ranks) {
  std::map<std::pair<int, std::string>, std::vector<int>> reps;  // (node, kind) -> its first two
  std::map<std::pair<int, std::string>, int> per_node_kind;
  for (int r : ranks) {
    const resolve::DeviceSpec& d = cost.topology().device(r);
    std::vector<int>& some = reps[{d.node, d.type}];
    if (some.size() < 2) some.push_back(r);
    ++per_node_kind[{d.node, d.type}];
  }
  RingLinkBound out;
  double fastest = 0, between_nodes = 0;
  for (const auto& [_, a_ranks] : reps) {
    for (int a : a_ranks) {
      for (const auto& [__, b_ranks] : reps) {
        for (int b : b_ranks) {
          if (a == b) continue;
          const double bus = cost.collective_link({a, b}).first;
          fastest = std::max(fastest, bus);
          if (cost.topology().device(a).node != cost.topology().device(b).node) between_nodes = std::max(between_nodes, bus);
        }
      }
    }
  }
  if (fastest > 0) out.fastest = fastest;
  out.between_nodes = between_nodes > 0 ? between_nodes : out.fastest;
  for (const auto& [_, n] : per_node_kind) out.widest_node = std::max(out.widest_node, n);
  return out;
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
    // Subsets of `extra` pipelines out of D: C(D, extra) of them, counted first, so that more than
    // the most are not listed (thousands of D-long vectors a shape). C(D, i) grows with i up to
    // D / 2, so counting up to min(extra, D - extra) may stop once past the most.
    const int e = std::min(extra, D - extra);
    size_t subsets = 1;
    for (int i = 0; i < e && subsets <= kMaxSpreads; ++i) subsets = subsets * (D - i) / (i + 1);
    if (subsets > kMaxSpreads || out.size() * subsets > kMaxSpreads) complete = false;
    std::vector<std::vector<int>> options;
    std::vector<int> mask(D, 0);
    std::fill(mask.begin(), mask.begin() + extra, 1);
    std::sort(mask.begin(), mask.end());
    do {
      if (!complete) break;
      std::vector<int> c(D, G / D);
      for (int p = 0; p < D; ++p) c[p] += mask[p];
      options.push_back(c);
    } while (std::next_permutation(mask.begin(), mask.end()) && options.size() <= kMaxSpreads);
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

std::vector<Group> PipelineSearch::groups_of(const std::string& kind, int t, int cp) const {
  std::vector<Group> out;
  const size_t n = static_cast<size_t>(t) * cp;
  for (const auto& [node, ranks] : devices.at(kind)) {
    for (size_t i = 0; i + n <= ranks.size(); i += n) {
      out.push_back({kind, node, std::vector<int>(ranks.begin() + i, ranks.begin() + i + n), cp});
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
std::vector<std::vector<Group>> PipelineSearch::mixes_of(const std::string& kind, int cp) const {
  std::vector<int> degrees;
  int largest_node = 0;
  for (const auto& [node, ranks] : devices.at(kind)) largest_node = std::max(largest_node, static_cast<int>(ranks.size()));
  for (int t = 1; t * cp <= largest_node; t *= 2) {
    if (tp_allowed(kind, t) && (!keep_tp.count(kind) || keep_tp.at(kind).count(t))) degrees.push_back(t);
  }
  std::vector<std::vector<Group>> out;
  for (int t : degrees) {
    std::vector<Group> g = groups_of(kind, t, cp);
    if (!g.empty()) out.push_back(std::move(g));
  }
  const bool small = num_devices <= 8;
  for (size_t i = 0; i < degrees.size(); ++i) {
    for (size_t j = i + 1; j < degrees.size(); ++j) {
      const int t_small = degrees[i], t_big = degrees[j];
      if (!small && t_big != 2 * t_small) continue;
      const int most = static_cast<int>(groups_of(kind, t_big, cp).size());
      const size_t n_big = static_cast<size_t>(t_big) * cp, n_small = static_cast<size_t>(t_small) * cp;
      for (int k = 1; k < most; ++k) {
        std::vector<Group> mix;
        int taken = 0;
        bool whole_nodes = true;
        for (const auto& [node, ranks] : devices.at(kind)) {
          size_t at = 0;
          for (; taken < k && at + n_big <= ranks.size(); at += n_big, ++taken) {
            mix.push_back({kind, node, std::vector<int>(ranks.begin() + at, ranks.begin() + at + n_big), cp});
          }
          if (at > 0 && at + n_big <= ranks.size()) whole_nodes = false;
          for (; at + n_small <= ranks.size(); at += n_small) {
            mix.push_back({kind, node, std::vector<int>(ranks.begin() + at, ranks.begin() + at + n_small), cp});
          }
        }
        if (!small && !whole_nodes) continue;
        // Large kinds: every stride-th count of nodes of t_big only (about 16 mixes per pair).
        const int nodes = static_cast<int>(devices.at(kind).size());
        if (num_devices > 64 && nodes > 16) {
          const int stride = (nodes + 15) / 16;
          std::set<int> big_nodes;
          for (const Group& g : mix) {
            if (g.tp() == t_big) big_nodes.insert(g.node);
          }
          if (static_cast<int>(big_nodes.size()) % stride != 0) continue;
        }
        out.push_back(std::move(mix));
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

double PipelineSearch::layer_time(const Group& g, int b) const {
  // A group is its first rank and its size (consecutive ranks of one node). Packed: 12 bits of
  // size, 10 of CP degree, 18 of micro-batch size (checked: a wrong key would mix groups).
  HSPMD_CHECK(g.ranks.size() < (1 << 12) && g.cp < (1 << 10) && b < (1 << 18))
      << "planner: group of " << g.ranks.size() << " ranks, CP " << g.cp << ", micro-batch " << b
      << " beyond the layer memo's key";
  const int64_t key = (static_cast<int64_t>(g.ranks.front()) << 40) | (static_cast<int64_t>(g.ranks.size()) << 28) |
                      (static_cast<int64_t>(g.cp) << 18) | b;
  auto it = layer_memo_.find(key);
  if (it != layer_memo_.end()) return it->second;
  // Bounds take the faster of SP and not whenever the planner may write SP (layer_seconds), so
  // that they stay below either.
  const double t = layer_seconds(cost, g, b, options.search_sequence_parallel);
  layer_memo_.emplace(key, t);
  return t;
}

// The cuts: a mix (or idle) per kind, at most one kind mixing degrees above 8 devices.
void PipelineSearch::build() {
  built_ = true;
  const bool small = num_devices <= 8;
  sizes_ = !keep_micro_batch_sizes.empty()     ? keep_micro_batch_sizes
           : options.micro_batch_sizes.empty() ? powers_of_two_dividing(options.global_batch, 8)
                                               : options.micro_batch_sizes;
  const std::vector<int> cp_degrees = searched_cp_degrees(options);
  std::vector<std::string> kinds;
  for (const auto& [kind, _] : devices) kinds.push_back(kind);
  // Every stage of a pipeline has one CP degree: a cut takes one for all its groups.
  for (int cp : cp_degrees) {
  std::vector<std::vector<std::vector<Group>>> mixes;  // per kind: its mixes (idle not listed)
  for (const std::string& kind : kinds) mixes.push_back(mixes_of(kind, cp));
  std::vector<int> pick(kinds.size(), -1);  // per kind: its mix, or -1 = idle
  std::function<void(size_t)> recurse = [&](size_t k) {
    if (k < kinds.size()) {
      for (int m = -1; m < static_cast<int>(mixes[k].size()); ++m) {
        pick[k] = m;
        recurse(k + 1);
      }
      return;
    }
    // Classes: the groups of one kind and one TP degree ("H800/TP4"), each spread evenly.
    Combo c;
    for (size_t i = 0; i < kinds.size(); ++i) {
      if (pick[i] < 0) continue;
      for (const Group& g : mixes[i][pick[i]]) {
        c.groups[kinds[i] + "/TP" + std::to_string(g.tp()) + (cp > 1 ? "CP" + std::to_string(cp) : "")].push_back(g);
        ++c.total;
      }
    }
    for (const auto& [cls, _] : c.groups) c.used.push_back(cls);
    if (c.used.empty()) return;
    const size_t used_kinds = kinds_of(c.groups).size();
    c.mixed = c.used.size() > used_kinds;
    // Above 8 devices, at most one kind mixes TP degrees.
    if (!small && c.used.size() > used_kinds + 1) return;
    for (const std::string& cls : c.used) {
      double cap = std::numeric_limits<double>::infinity();
      std::vector<double> least(sizes_.size(), std::numeric_limits<double>::infinity());
      for (const Group& g : c.groups.at(cls)) {
        for (int r : g.ranks) {
          const double m = cost.topology().device(r).memory;
          if (m > 0) cap = std::min(cap, m);
        }
        double best = 0;
        for (size_t i = 0; i < sizes_.size(); ++i) {
          const double t = layer_time(g, sizes_[i]);
          best = std::max(best, sizes_[i] / t);
          least[i] = std::min(least[i], t);
        }
        c.rate_max += best;
      }
      c.capacity.push_back(cap);
      c.least_layer_time.push_back(std::move(least));
      // The head's compute (CostModel::stage_compute of no layers on the last stage), without SP:
      // SP pads the tokens, never fewer.
      const Group& g = c.groups.at(cls).front();
      std::vector<double> head(sizes_.size());
      for (size_t i = 0; i < sizes_.size(); ++i) head[i] = cost.stage_compute(g.kind, g.tp(), 0, true, sizes_[i], g.cp);
      c.head.push_back(std::move(head));
    }
    combos_.push_back(std::move(c));
  };
  recurse(0);
  }
  std::vector<int> ranks;
  for (const auto& [kind, nodes] : devices) {
    for (const auto& [node, r] : nodes) ranks.insert(ranks.end(), r.begin(), r.end());
  }
  ring_bound_ = ring_link_bound(cost, ranks);
  for (int i = 0; i < static_cast<int>(combos_.size()); ++i) push_shape(i, combos_[i].total + 1);
}

// Every candidate of shape (c, D) takes at least this long: its pipelines' micro-batch sizes b_p
// give sum_p b_p R_p <= sum over groups of max_b b / layer time (rate_max) and bubbles
// sum_p b_p (S_p - 1) >= b_min (G - D).
double PipelineSearch::shape_bound(const Combo& c, int D) const {
  const double b_min = *std::min_element(sizes_.begin(), sizes_.end());
  return (static_cast<double>(options.global_batch) + b_min * (c.total - D)) * layers / c.rate_max;
}

const PipelineFloor& PipelineSearch::floor(const Combo& c, int D, const std::vector<int>& counts, size_t size,
                                           int head_class, const std::vector<std::pair<int, int>>& most) {
  // A stage alone holds the embedding and the head too: its own most layers.
  int stage_count = 0;
  for (int n : counts) stage_count += n;
  std::vector<int> caps(most.size());
  for (size_t k = 0; k < most.size(); ++k) caps[k] = stage_count == 1 ? most[k].second : most[k].first;
  std::vector<int> key{static_cast<int>(size), head_class};
  key.insert(key.end(), counts.begin(), counts.end());
  auto it = floors_.find(key);
  if (it != floors_.end()) return it->second;
  // Class k's stages at its least layer time; the head's stage apart, with the head as its fixed
  // time; each with its least tail a layer (the floor couples the tails with the split).
  std::vector<StageClass> stages;
  for (size_t k = 0; k < counts.size(); ++k) {
    const int head = static_cast<int>(k) == head_class ? 1 : 0;
    const Group& g = c.groups.at(c.used[k]).front();
    // ZeRO-3 gathers each layer's weights twice and scatters its gradient every micro-batch, over
    // the ring of its holders (LayerPrograms::stage_lines): here at the fastest link it may use.
    const double gathers = options.zero1 && options.zero3
                               ? cost.zero3_comm(g.kind, D * g.cp, {ring_bound_.at_most(D), 0}, 1, false, false, g.tp())
                               : 0;
    const double t = c.least_layer_time[k][size] + gathers, tail = tail_per_layer(c, k, D);
    stages.push_back({counts[k] - head, t, 0, caps[k], tail, 0});
    if (head) stages.push_back({1, t, c.head[k][size], caps[k], tail, 0});
  }
  return floors_.emplace(std::move(key), PipelineFloor(stages, layers)).first->second;
}

// Every candidate of shape (c, D) comes from one of its spreads (spreads()): pipeline p has
// counts_p groups of each class. Within T it takes at most max over sizes b of b x most_within(T)
// sequences of its floor (the head left out: it only adds), so the least T at which a spread's
// pipelines take the batch so is at most the least_step of every candidate of that spread (each
// pipeline at its own size, its head counted); the least over the spreads bounds the shape. A
// spread with a pipeline whose stages cannot hold the layers has no candidate (expand skips it).
double PipelineSearch::shape_integer_bound(const Combo& c, int D) {
  floors_.clear();
  const std::vector<std::pair<int, int>> most = most_layers(c, D);
  double out = std::numeric_limits<double>::infinity();
  for (const auto& count : spreads(c.used, c.groups, D)) {
    // Pipelines of equal counts, and how many there are.
    std::vector<const std::vector<int>*> per_class;
    for (const std::string& cls : c.used) per_class.push_back(&count.at(cls));
    std::map<std::vector<int>, int64_t> pipelines_of;  // counts -> pipelines
    std::vector<int> counts(c.used.size());
    for (int p = 0; p < D; ++p) {
      for (size_t k = 0; k < counts.size(); ++k) counts[k] = (*per_class[k])[p];
      ++pipelines_of[counts];
    }
    // Per kind of pipeline: its floors at every size, and how many pipelines it has.
    std::vector<std::pair<std::vector<std::pair<const PipelineFloor*, int64_t>>, int64_t>> kinds;
    std::vector<const PipelineFloor*> all;
    bool fits = true;
    for (const auto& [counts, pipes] : pipelines_of) {
      std::vector<std::pair<const PipelineFloor*, int64_t>> at_sizes;
      for (size_t i = 0; i < sizes_.size(); ++i) {
        const PipelineFloor& f = floor(c, D, counts, i, -1, most);
        if (!f.fits()) continue;
        at_sizes.push_back({&f, sizes_[i]});
        all.push_back(&f);
      }
      fits = fits && !at_sizes.empty();
      kinds.push_back({std::move(at_sizes), pipes});
    }
    if (!fits) continue;
    auto taken = [&](double T) {
      int64_t sum = 0;
      for (const auto& [at_sizes, pipes] : kinds) {
        int64_t best = 0;
        for (const auto& [f, b] : at_sizes) best = std::max(best, b * f->most_within(T));
        sum += pipes * best;
      }
      return sum;
    };
    double lo = 0, hi = 0;
    for (const auto& [at_sizes, pipes] : kinds) {
      double least = std::numeric_limits<double>::infinity();
      for (const auto& [f, b] : at_sizes) least = std::min(least, f->at(1));
      lo = std::max(lo, least);  // every pipeline runs a micro-batch
    }
    // Every pipeline running the batch over D pipelines at its smallest size takes it.
    for (const PipelineFloor* f : all) hi = std::max(hi, f->at((options.global_batch + D - 1) / D));
    out = std::min(out, least_time(taken, all, lo, std::max(lo, hi), options.global_batch));
  }
  return out;
}

// What a stage of class k spends after its pipeline's passes at least, per layer it holds: the
// gradient sync no overlap hides and the optimizer step, on its layers' parameters (not the
// embedding's or head's: a stage holds at least its layers), over a ring of the D pipelines x its
// CP ranks at the fastest link that ring may use (between nodes once D groups of at least one
// device outnumber a node's devices) and without latency. Linear in the layers, the same terms as
// LayerPrograms::tail_floor at a faster link: never more.
double PipelineSearch::tail_per_layer(const Combo& c, size_t k, int D) const {
  const Group& g = c.groups.at(c.used[k]).front();
  const double params = shape.layer_parameters / g.tp();
  const int replicas = D * g.cp;
  const double bus = ring_bound_.at_most(D);
  // With gradient buckets the reduce may hide behind the backward pass, all but ZeRO-1/2's
  // parameter all-gather; ZeRO-3 gathers per micro-batch instead.
  double sync = 0;
  if (replicas > 1 && !options.zero3) {
    if (cost.options().grad_bucket_mb <= 0) {
      sync = CostModel::ring_allreduce(replicas, {bus, 0}, params * 4);
    } else if (options.zero1) {
      sync = CostModel::ring_allgather(replicas, {bus, 0}, params * 4);
    }
  }
  const double optimizer = cost.profile().kind(g.kind).optimizer_seconds_per_parameter;
  return sync + optimizer * params / (options.zero1 ? replicas : 1);
}

// Every plan of shape (c, D) ends its step with a gradient sync and optimizer step of at least
// this long: each pipeline has at most S = sum_k ceil(G_k / D) stages, so one of its stages holds
// at least L / S layers, each costing at least the least tail_per_layer of the cut's classes.
double PipelineSearch::tail_bound(const Combo& c, int D) const {
  int64_t stages = 0;
  double least = std::numeric_limits<double>::infinity();
  for (size_t k = 0; k < c.used.size(); ++k) {
    stages += (static_cast<int64_t>(c.groups.at(c.used[k]).size()) + D - 1) / D;
    least = std::min(least, tail_per_layer(c, k, D));
  }
  return static_cast<double>(layers) / static_cast<double>(stages) * least;
}

// Whether some candidate of shape (c, D) may fit in memory. A stage of class k holds at most
// most_k layers (its memory with one micro-batch of the smallest size in flight, not holding the
// embedding or head: less than any stage of that class needs). Every pipeline has G_k / D groups
// of class k and some of the E = sum_k (G_k mod D) extra groups, so some pipeline has at most
// E / D extras (pigeonhole) and must hold all layers with them.
std::vector<std::pair<int, int>> PipelineSearch::most_layers(const Combo& c, int D) const {
  const int b_min = *std::min_element(sizes_.begin(), sizes_.end());
  std::vector<std::pair<int, int>> out;
  for (size_t k = 0; k < c.used.size(); ++k) {
    const std::vector<Group>& g = c.groups.at(c.used[k]);
    const std::string& kind = g.front().kind;
    const int t = g.front().tp(), cp = g.front().cp;
    auto most = [&](bool ends) {
      if (c.capacity[k] == std::numeric_limits<double>::infinity()) return layers;
      const bool zero2 = options.zero1 && (options.zero2 || options.zero3), zero3 = options.zero1 && options.zero3;
      const bool sp = options.sequence_parallel && t > 1;
      auto at = [&](int x) {
        return cost.stage_memory(kind, t, x, ends, ends, b_min, 1, D, options.zero1, cp, zero2, sp, zero3).total();
      };
      const double m1 = at(1), m2 = at(2);
      if (m1 > c.capacity[k]) return 0;
      if (m2 <= m1) return layers;
      return static_cast<int>(std::min<double>(layers, 1 + std::floor((c.capacity[k] - m1) / (m2 - m1))));
    };
    out.push_back({most(false), most(true)});
  }
  return out;
}

bool PipelineSearch::shape_fits(const Combo& c, int D) const {
  const int b_min = *std::min_element(sizes_.begin(), sizes_.end());
  if (static_cast<int64_t>(D) * b_min > options.global_batch) return false;  // a micro-batch each
  const std::vector<std::pair<int, int>> most = most_layers(c, D);
  int64_t extras = 0, floor_room = 0, floor_stages = 0, most_of_all = 0, most_alone = 0;
  for (size_t k = 0; k < c.used.size(); ++k) {
    const int G = static_cast<int>(c.groups.at(c.used[k]).size());
    extras += G % D;
    floor_stages += G / D;
    floor_room += static_cast<int64_t>(G / D) * most[k].first;
    most_of_all = std::max<int64_t>(most_of_all, most[k].first);
    most_alone = std::max<int64_t>(most_alone, most[k].second);
  }
  const int64_t fewest_extras = extras / D;
  // A pipeline of one stage holds the embedding and the head too.
  if (floor_stages + fewest_extras == 1) return most_alone >= layers;
  return floor_stages + fewest_extras >= 1 && floor_room + fewest_extras * most_of_all >= layers;
}

int PipelineSearch::next_shape_D(const Combo& c, int below) {
  for (int D = std::min(below - 1, c.total); D >= 1; --D) {
    if (shape_fits(c, D)) return D;
    // Memory dropped it unless D pipelines cannot each take a micro-batch.
    if (static_cast<int64_t>(D) * *std::min_element(sizes_.begin(), sizes_.end()) <= options.global_batch) {
      memory_dropped_bound_ = std::min(memory_dropped_bound_, shape_bound(c, D));
    }
  }
  return 0;
}

// A cut's shapes come as a stream, from its largest feasible D down: the stream's entry (kind -2)
// holds the pipeline part of the bound, which only grows as D falls, so it stays below every
// shape still to come; popping it queues the shape (kind -1) with its full bound, the gradient
// sync's included (which may fall as D falls), and the stream's next D.
void PipelineSearch::push_shape(int combo, int below) {
  const int D = next_shape_D(combos_[combo], below);
  if (D < 1) return;
  queue_.push({shape_bound(combos_[combo], D), seq_++, combo, D, -2});
}

double PipelineSearch::lowest_bound() const {
  return queue_.empty() ? std::numeric_limits<double>::infinity() : queue_.top().bound;
}

// The pipelines of a spread (groups of each class per pipeline) with the classes in `order`: each
// class's groups handed out in turn.
std::vector<std::vector<Group>> PipelineSearch::pipelines_of(const Combo& c,
                                                             const std::map<std::string, std::vector<int>>& count,
                                                             const std::vector<std::string>& order) const {
  const int D = static_cast<int>(count.begin()->second.size());
  std::vector<std::vector<Group>> pipes(D);
  std::map<std::string, size_t> next;
  for (int p = 0; p < D; ++p) {
    for (const std::string& cls : order) {
      for (int i = 0; i < count.at(cls)[p]; ++i) pipes[p].push_back(c.groups.at(cls)[next[cls]++]);
    }
  }
  return pipes;
}

// The candidates of shape (combo, D): every spread, order of the classes and micro-batch sizes.
void PipelineSearch::expand(int combo, int D, double threshold) {
  const bool small = num_devices <= 8;  // the search is complete up to 8 devices
  Combo& cb = combos_[combo];
  const std::vector<std::string>& used = cb.used;
  std::map<std::string, std::vector<Group>>& groups = cb.groups;
  const std::vector<std::pair<int, int>> most = most_layers(cb, D);
  const double tail = tail_bound(cb, D);
  floors_.clear();
  const std::vector<std::map<std::string, std::vector<int>>> all_spreads = spreads(used, groups, D);
  for (size_t spread = 0; spread < all_spreads.size(); ++spread) {
    const std::map<std::string, std::vector<int>>& count = all_spreads[spread];
    // Every pipeline needs a stage, at most a layer a stage, and room for every layer.
    bool ok = true;
    for (int p = 0; p < D && ok; ++p) {
      int stages = 0, room = 0;
      for (size_t k = 0; k < used.size(); ++k) {
        const int n = count.at(used[k])[p];
        stages += n;
        room += n * most[k].first;
      }
      if (stages == 1) {
        for (size_t k = 0; k < used.size(); ++k) room = count.at(used[k])[p] ? most[k].second : room;
      }
      ok = stages >= 1 && stages <= layers && room >= layers;
    }
    if (!ok) continue;
    std::vector<std::vector<int>> counts_of(D, std::vector<int>(used.size()));
    for (int p = 0; p < D; ++p) {
      for (size_t k = 0; k < used.size(); ++k) counts_of[p][k] = count.at(used[k])[p];
    }
    // Every order of the classes along the pipelines, every micro-batch size.
    std::vector<std::string> order = used;
    std::sort(order.begin(), order.end());
    do {
      // Above 8 devices, the classes of one kind stay together along the pipelines.
      if (!small && !kinds_contiguous(order, groups)) continue;
      std::vector<int> order_index;  // `order` as indices into `used`
      for (const std::string& cls : order) {
        order_index.push_back(static_cast<int>(std::find(used.begin(), used.end(), cls) - used.begin()));
      }
      const std::vector<std::vector<Group>> pipes = pipelines_of(cb, count, order);
      const std::vector<std::vector<int>> assignments = size_assignments(pipes, sizes_, cb.mixed);
      for (size_t assignment = 0; assignment < assignments.size(); ++assignment) {
        const std::vector<int>& bs = assignments[assignment];
        // Pipeline p needs at least (n_p + S_p - 1) * L / R_p, R_p = sum over its stages of
        // 1 / (seconds per layer at b_p): its slowest stage holds at least L / R_p of layer work per
        // micro-batch. Within a step time T it takes n_p <= T R_p / L - (S_p - 1) micro-batches, and
        // sum_p n_p b_p = B (the global batch), so T >= L (B + sum_p b_p (S_p - 1)) / sum_p b_p R_p,
        // a lower bound on the step (with the shape's least gradient sync and optimizer after it).
        double rate = 0, bubbles = 0;
        for (size_t p = 0; p < pipes.size(); ++p) {
          double r = 0;
          for (const Group& g : pipes[p]) r += 1.0 / layer_time(g, bs[p]);
          rate += bs[p] * r;
          bubbles += bs[p] * (static_cast<double>(pipes[p].size()) - 1);
        }
        // And T >= the least time at which the pipelines take the batch in whole micro-batches
        // (least_step): n_p b_p sequences of B ~ D, n_p a few, so a pipeline's last micro-batch is
        // a tenth of its time and the real-valued bound above misses it. Each pipeline's floor
        // (PipelineFloor: its classes' least layer times, the head on its last stage) couples its
        // stages' sum and bottleneck; pipelines of equal counts, last class and size share one.
        std::vector<std::pair<const PipelineFloor*, int64_t>> floors;
        for (int p = 0; p < D; ++p) {
          const size_t size = static_cast<size_t>(std::find(sizes_.begin(), sizes_.end(), bs[p]) - sizes_.begin());
          int last = -1;  // the class of the pipeline's last stage
          for (int k : order_index) {
            if (counts_of[p][k] > 0) last = k;
          }
          const PipelineFloor* f = &floor(cb, D, counts_of[p], size, last, most);
          auto same = std::find_if(floors.begin(), floors.end(), [&](const auto& x) { return x.first == f; });
          if (same == floors.end()) {
            floors.push_back({f, bs[p]});
          } else {
            same->second += bs[p];
          }
        }
        const double integer = least_step(floors, options.global_batch);
        const double bound =
            std::max((static_cast<double>(options.global_batch) + bubbles) * layers / rate + tail, integer);
        ++generated_;
        if (bound >= threshold) continue;  // never visited: the threshold only falls
        // Kept as where it comes from, not as its thousand ranks: rebuilt when taken.
        const int64_t id = seq_++;
        queue_.push({bound, id, combo, D, id});
        pending_.emplace(id, Pending{static_cast<int>(spread), static_cast<int>(assignment), order});
      }
    } while (std::next_permutation(order.begin(), order.end()));
  }
}

std::optional<Candidate> PipelineSearch::next(double threshold) {
  if (!built_) build();
  while (!queue_.empty() && queue_.top().bound < threshold) {
    const Entry e = queue_.top();
    queue_.pop();
    if (e.candidate >= 0) {
      auto it = pending_.find(e.candidate);
      const Pending pending = std::move(it->second);
      pending_.erase(it);
      const Combo& cb = combos_[e.combo];
      Candidate c;
      c.pipelines = pipelines_of(cb, spreads(cb.used, cb.groups, e.D)[pending.spread], pending.order);
      c.micro_batch_sizes = size_assignments(c.pipelines, sizes_, cb.mixed)[pending.sizes];
      c.bound = e.bound;
      return c;
    }
    if (e.candidate == -2) {
      push_shape(e.combo, e.D);
      const int D = e.D;
      queue_.push({shape_bound(combos_[e.combo], D) + tail_bound(combos_[e.combo], D), seq_++, e.combo, D, -1});
      continue;
    }
    if (e.candidate == -1) {
      // At the front by its real-valued bound: its integer bound (a few floors) before its
      // candidates (every spread, order and size); where that is higher, it waits its turn again.
      const double integer = shape_integer_bound(combos_[e.combo], e.D);
      if (integer > e.bound) {
        if (integer < std::numeric_limits<double>::infinity()) queue_.push({integer, seq_++, e.combo, e.D, -3});
        continue;
      }
    }
    ++shapes_;
    expand(e.combo, e.D, threshold);
  }
  return std::nullopt;
}

}  // namespace hspmd::planner
