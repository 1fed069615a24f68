#include "hspmd/planner/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "hspmd/core/error.h"
#include "hspmd/planner/milp.h"
#include "hspmd/specialize/plan_report.h"

namespace hspmd::planner {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Group {
  std::string kind;
  int node = 0;
  std::vector<int> ranks;  // ascending, one node
};

// A level-1 candidate: pipelines as sequences of TP groups, one micro-batch size.
struct Candidate {
  std::map<std::string, int> tp;  // used kinds only
  int micro_batch_size = 1;
  std::vector<std::vector<Group>> pipelines;
  double bound = 0;  // lower bound on the step time
};

// What a stage costs as a function of its layer count x (all affine in x).
struct StageLine {
  std::string kind;
  int tp = 1;
  bool first = false, last = false;
  double per_layer = 0, fixed = 0;       // f(x) = per_layer x + fixed, per micro-batch
  double tail_per_layer = 0, tail_fixed = 0;  // gradient sync + optimizer, per step
  double capacity = 0;
};

// A layer split and the pipeline time it gives for n micro-batches: A + (n - 1) B.
struct SplitLine {
  std::vector<int> layers;
  double A = 0, B = 0;
  double at(double m) const { return A + m * B; }
};

// One piece of g(n), the best pipeline time for n micro-batches: a layer split that is the best for
// n_min <= n <= n_max, taking A + (n - 1) B.
struct Piece {
  SplitLine line;
  int n_min = 1, n_max = 1;
};

// g(n) of one pipeline as pieces; n with no piece: nothing fits in memory.
struct PipelineTable {
  std::vector<Piece> pieces;
  // The best piece covering n, or nullptr.
  const Piece* at(int n) const {
    const Piece* best = nullptr;
    for (const Piece& p : pieces) {
      if (p.n_min <= n && n <= p.n_max && (!best || p.line.at(n - 1) < best->line.at(n - 1))) best = &p;
    }
    return best;
  }
};

std::vector<int> powers_of_two_dividing(int64_t n, int64_t up_to) {
  std::vector<int> out;
  for (int64_t b = 1; b <= up_to && b <= n; b *= 2) {
    if (n % b == 0) out.push_back(static_cast<int>(b));
  }
  return out;
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::ostringstream s;
  for (size_t i = 0; i < ranks.size(); ++i) s << (i ? "," : "") << ranks[i];
  return s.str();
}

}  // namespace

// The state of one planning run: available devices by kind and node, counters, caches.
struct Planner::Search {
  const Planner& planner;
  const CostModel& cost;
  const ModelShape& shape;
  int layers = 0;
  int num_devices = 0;
  std::map<std::string, std::map<int, std::vector<int>>> devices;  // kind -> node -> ranks
  int milps = 0;
  std::map<std::string, PipelineTable> tables;  // by pipeline signature
  // Fixed TP degrees per kind (options, or the previous plan's when re-planning) and, when
  // re-planning, the previous micro-batch sizes.
  std::map<std::string, int> keep_tp;
  std::vector<int> keep_micro_batch_sizes;

  // The ways to spread each kind's groups over D pipelines as evenly as possible: G / D each, and
  // G % D pipelines with one more. Every choice of those pipelines while the combinations are few
  // (small clusters: the search is complete there); otherwise one rotation, so that extras of
  // different kinds land on different pipelines.
  std::vector<std::map<std::string, std::vector<int>>> spreads(
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

  Search(const Planner& p, const std::vector<int>& available)
      : planner(p),
        cost(p.cost_),
        shape(p.cost_.shape()),
        layers(static_cast<int>(p.cost_.shape().layers)),
        num_devices(static_cast<int>(available.size())) {
    for (int r : available) {
      const resolve::DeviceSpec& d = p.topology_.device(r);
      devices[d.type][d.node].push_back(r);
    }
    for (auto& [kind, nodes] : devices) {
      for (auto& [node, ranks] : nodes) std::sort(ranks.begin(), ranks.end());
    }
  }

  bool tp_allowed(const std::string& kind, int t) const {
    for (int64_t size : {shape.heads, shape.kv_heads, shape.hidden, shape.ffn, shape.vocab}) {
      if (size % t != 0) return false;
    }
    return planner.profile_.has(kind, t);
  }

  std::vector<Group> groups_of(const std::string& kind, int t) const {
    std::vector<Group> out;
    for (const auto& [node, ranks] : devices.at(kind)) {
      for (size_t i = 0; i + t <= ranks.size(); i += t) {
        out.push_back({kind, node, std::vector<int>(ranks.begin() + i, ranks.begin() + i + t)});
      }
    }
    return out;
  }

  double layer_seconds(const Group& g, int b) const {
    return cost.stage_compute(g.kind, static_cast<int>(g.ranks.size()), 1, false, b) +
           cost.stage_tp_comm(g.ranks, 1, b);
  }

  std::vector<Candidate> candidates() const {
    std::vector<std::string> kinds;
    for (const auto& [kind, _] : devices) kinds.push_back(kind);
    std::vector<std::vector<int>> choices;  // per kind: 0 = idle, else t
    for (const std::string& kind : kinds) {
      std::vector<int> c{0};
      int largest_node = 0;
      for (const auto& [node, ranks] : devices.at(kind)) largest_node = std::max(largest_node, static_cast<int>(ranks.size()));
      for (int t = 1; t <= largest_node; t *= 2) {
        if (tp_allowed(kind, t) && (!keep_tp.count(kind) || keep_tp.at(kind) == t)) c.push_back(t);
      }
      choices.push_back(c);
    }
    const std::vector<int> sizes = !keep_micro_batch_sizes.empty() ? keep_micro_batch_sizes
                                   : planner.options_.micro_batch_sizes.empty()
                                       ? powers_of_two_dividing(planner.options_.global_batch, 8)
                                       : planner.options_.micro_batch_sizes;
    std::vector<Candidate> out;
    std::vector<int> pick(kinds.size(), 0);
    std::function<void(const std::vector<std::string>&, std::map<std::string, std::vector<Group>>&,
                       const std::map<std::string, std::vector<int>>&, int)>
        add;
    std::function<void(size_t)> recurse = [&](size_t k) {
      if (k < kinds.size()) {
        for (int t : choices[k]) {
          pick[k] = t;
          recurse(k + 1);
        }
        return;
      }
      std::vector<std::string> used;
      std::map<std::string, std::vector<Group>> groups;
      int total = 0;
      for (size_t i = 0; i < kinds.size(); ++i) {
        if (pick[i] == 0) continue;
        groups[kinds[i]] = groups_of(kinds[i], pick[i]);
        if (groups[kinds[i]].empty()) return;  // same as leaving the kind idle: counted there
        used.push_back(kinds[i]);
        total += static_cast<int>(groups[kinds[i]].size());
      }
      if (used.empty()) return;
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
    // Every order of the used kinds along the pipelines, every micro-batch size.
    add = [&](const std::vector<std::string>& used, std::map<std::string, std::vector<Group>>& groups,
              const std::map<std::string, std::vector<int>>& count, int D) {
      std::vector<std::string> order = used;
      std::sort(order.begin(), order.end());
      do {
        std::vector<std::vector<Group>> pipes(D);
        std::map<std::string, size_t> next;
        for (int p = 0; p < D; ++p) {
          for (const std::string& kind : order) {
            for (int i = 0; i < count.at(kind)[p]; ++i) pipes[p].push_back(groups[kind][next[kind]++]);
          }
        }
        for (int b : sizes) {
          const int64_t N = planner.options_.global_batch / b;
          if (N < D) continue;
          Candidate c;
          for (size_t i = 0; i < kinds.size(); ++i) {
            if (pick[i]) c.tp[kinds[i]] = pick[i];
          }
          c.micro_batch_size = b;
          c.pipelines = pipes;
          // Pipeline p needs at least (n_p + S_p - 1) * L / R_p, R_p = sum over its stages of
          // 1 / (seconds per layer): its slowest stage holds at least L / R_p of layer work per
          // micro-batch. Relaxing n_p to reals, the slowest pipeline is fastest when all finish
          // together: T = L (N + sum_p (S_p - 1)) / sum_p R_p, a lower bound on the step.
          double rate = 0, bubbles = 0;
          for (const auto& pipe : pipes) {
            for (const Group& g : pipe) rate += 1.0 / layer_seconds(g, b);
            bubbles += static_cast<double>(pipe.size()) - 1;
          }
          c.bound = (static_cast<double>(N) + bubbles) * layers / rate;
          out.push_back(std::move(c));
        }
      } while (std::next_permutation(order.begin(), order.end()));
    };
    recurse(0);
    std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) { return a.bound < b.bound; });
    return out;
  }

  // Stage lines of pipeline p of candidate c.
  std::vector<StageLine> stage_lines(const Candidate& c, size_t p) const {
    const auto& pipe = c.pipelines[p];
    const int D = static_cast<int>(c.pipelines.size());
    const int b = c.micro_batch_size;
    const bool zero1 = planner.options_.zero1;
    std::vector<StageLine> out;
    for (size_t j = 0; j < pipe.size(); ++j) {
      const Group& g = pipe[j];
      StageLine s;
      s.kind = g.kind;
      s.tp = static_cast<int>(g.ranks.size());
      s.first = j == 0;
      s.last = j + 1 == pipe.size();
      s.per_layer = layer_seconds(g, b);
      s.fixed = s.last ? cost.stage_compute(g.kind, s.tp, 0, true, b)
                       : cost.p2p(g.ranks.front(), pipe[j + 1].ranks.front(), b);
      // The gradient ring: this stage and the same-index stage (or the nearest) of every other pipeline.
      std::vector<int> ring;
      for (const auto& other : c.pipelines) ring.push_back(other[std::min(j, other.size() - 1)].ranks.front());
      auto tail = [&](int x) {
        double params = x * shape.layer_parameters + (s.first ? shape.embedding_parameters : 0) +
                        (s.last ? shape.head_parameters : 0);
        params /= s.tp;
        return cost.allreduce(ring, params * 4) + planner.profile_.kind(g.kind).optimizer_seconds_per_parameter *
                                                      params / (zero1 ? D : 1);
      };
      s.tail_per_layer = tail(2) - tail(1);
      s.tail_fixed = tail(1) - s.tail_per_layer;
      s.capacity = kInf;
      for (int r : g.ranks) {
        const double m = planner.topology_.device(r).memory;
        if (m > 0) s.capacity = std::min(s.capacity, m);
      }
      out.push_back(s);
    }
    return out;
  }

  double memory(const StageLine& s, int x, int b, int in_flight, int D) const {
    return cost.stage_memory(s.kind, s.tp, x, s.first, s.last, b, in_flight, D, planner.options_.zero1).total();
  }

  // The best split for m = n - 1 with in_flight[j] micro-batches in flight per stage, or none.
  std::optional<SplitLine> best_split(const std::vector<StageLine>& st, double m, const std::vector<int>& in_flight,
                                      int b, int D) {
    const int S = static_cast<int>(st.size());
    Milp ilp;
    std::vector<int> x(S);
    // Memory is affine in the layer count: at most most[j] layers fit on stage j.
    std::vector<int> most(S, layers);
    int room = 0;
    for (int j = 0; j < S; ++j) {
      const double m1 = memory(st[j], 1, b, in_flight[j], D), m2 = memory(st[j], 2, b, in_flight[j], D);
      if (m1 > st[j].capacity) return std::nullopt;
      if (m2 > m1) most[j] = static_cast<int>(std::min<double>(layers, 1 + std::floor((st[j].capacity - m1) / (m2 - m1))));
      room += most[j];
    }
    if (room < layers) return std::nullopt;  // no split fits: no need to ask the solver
    const int z = ilp.add_var(0, kInfinity, m, false);
    const int w = ilp.add_var(0, kInfinity, 1, false);
    std::vector<std::pair<int, double>> sum;
    for (int j = 0; j < S; ++j) {
      x[j] = ilp.add_var(1, most[j], st[j].per_layer, true);
      sum.push_back({x[j], 1});
      ilp.add_row({{z, 1}, {x[j], -st[j].per_layer}}, st[j].fixed, kInfinity);
      ilp.add_row({{w, 1}, {x[j], -st[j].tail_per_layer}}, st[j].tail_fixed, kInfinity);
    }
    ilp.add_row(sum, layers, layers);
    ++milps;
    const auto v = ilp.minimize();
    if (!v) return std::nullopt;
    SplitLine line;
    double tail = 0;
    for (int j = 0; j < S; ++j) {
      const int xj = static_cast<int>((*v)[x[j]]);
      line.layers.push_back(xj);
      const double f = st[j].per_layer * xj + st[j].fixed;
      line.A += f;
      line.B = std::max(line.B, f);
      tail = std::max(tail, st[j].tail_per_layer * xj + st[j].tail_fixed);
    }
    line.A += tail;
    return line;
  }

  // g(n) for n = 1..max_n of one pipeline (see the header: exact envelope for n >= S).
  PipelineTable table(const std::vector<StageLine>& st, int max_n, int b, int D) {
    std::ostringstream key;
    key.precision(17);
    key << max_n << "/" << b << "/" << D;
    for (const StageLine& s : st) {
      key << "|" << s.kind << "," << s.tp << "," << s.first << s.last << "," << s.per_layer << "," << s.fixed << ","
          << s.tail_per_layer << "," << s.tail_fixed << "," << s.capacity;
    }
    auto it = tables.find(key.str());
    if (it != tables.end()) return it->second;

    const int S = static_cast<int>(st.size());
    PipelineTable t;
    auto flights = [&](int n) {
      std::vector<int> f(S);
      for (int j = 0; j < S; ++j) f[j] = cost.in_flight(S, j, n);
      return f;
    };
    const bool gpipe = cost.options().schedule == specialize::ScheduleKind::kGPipe;
    const int individual = gpipe ? max_n : std::min(max_n, S - 1);
    for (int n = 1; n <= individual; ++n) {
      if (auto l = best_split(st, n - 1, flights(n), b, D)) t.pieces.push_back({*l, n, n});
    }
    if (!gpipe && max_n >= S) {
      const std::vector<int> f = flights(S);  // the same for every n >= S
      const double lo = S - 1, hi = max_n - 1;
      auto lo_line = best_split(st, lo, f, b, D);
      if (lo_line) {
        auto hi_line = best_split(st, hi, f, b, D);
        std::vector<SplitLine> lines{*lo_line, *hi_line};
        std::function<void(double, const SplitLine&, double, const SplitLine&)> envelope =
            [&](double a, const SplitLine& la, double c, const SplitLine& lc) {
              if (la.layers == lc.layers || la.B <= lc.B) return;
              const double cross = (lc.A - la.A) / (la.B - lc.B);
              if (!(cross > a && cross < c)) return;
              auto lm = best_split(st, cross, f, b, D);
              if (!lm || lm->at(cross) >= la.at(cross) - 1e-9 * std::abs(la.at(cross))) return;
              lines.push_back(*lm);
              envelope(a, la, cross, *lm);
              envelope(cross, *lm, c, lc);
            };
        envelope(lo, *lo_line, hi, *hi_line);
        for (const SplitLine& l : lines) t.pieces.push_back({l, S, max_n});
      }
    }
    tables.emplace(key.str(), t);
    return t;
  }

  // Level 2 for one candidate: the strategy, or none when nothing fits.
  std::optional<sharding::Strategy> solve(const Candidate& c) {
    const int D = static_cast<int>(c.pipelines.size());
    const int b = c.micro_batch_size;
    const int N = static_cast<int>(planner.options_.global_batch / b);
    const int max_n = N - (D - 1);
    std::vector<PipelineTable> tabs;
    for (int p = 0; p < D; ++p) {
      tabs.push_back(table(stage_lines(c, p), max_n, b, D));
      if (tabs.back().pieces.empty()) return std::nullopt;
    }
    std::vector<int> n_of(D, N);
    if (D == 1 && !tabs[0].at(N)) return std::nullopt;
    if (D > 1) {
      // g_p(n) for every pipeline and count (kInf: does not fit).
      std::vector<std::vector<double>> g(D, std::vector<double>(max_n + 1, kInf));
      std::vector<double> values;
      for (int p = 0; p < D; ++p) {
        for (int n = 1; n <= max_n; ++n) {
          if (const Piece* k = tabs[p].at(n)) g[p][n] = k->line.at(n - 1);
          if (g[p][n] < kInf) values.push_back(g[p][n]);
        }
      }
      // Exact preprocessing: g_p grows with n, so the optimum T* is the least value at which the
      // pipelines can take N micro-batches between them, and an optimal solution runs
      // lo_p <= n_p <= hi_p = the most micro-batches pipeline p finishes within T*.
      std::sort(values.begin(), values.end());
      auto most_within = [&](int p, double T) {
        int most = 0;
        for (int n = 1; n <= max_n && g[p][n] <= T; ++n) most = n;
        return most;
      };
      auto enough = [&](double T) {
        int64_t sum = 0;
        for (int p = 0; p < D; ++p) {
          const int m = most_within(p, T);
          if (m == 0) return false;
          sum += m;
        }
        return sum >= N;
      };
      auto it = std::partition_point(values.begin(), values.end(), [&](double T) { return !enough(T); });
      if (it == values.end()) return std::nullopt;
      std::vector<int> hi(D);
      int64_t hi_sum = 0;
      for (int p = 0; p < D; ++p) hi_sum += hi[p] = most_within(p, *it);
      // The micro-batch program over that window: binary y_pn = pipeline p runs n micro-batches.
      Milp ilp;
      const int T = ilp.add_var(0, kInfinity, 1, false);
      std::vector<std::pair<int, double>> total;
      std::vector<std::vector<std::pair<int, int>>> y(D);  // (var, n)
      for (int p = 0; p < D; ++p) {
        const int lo = static_cast<int>(std::max<int64_t>(1, N - (hi_sum - hi[p])));
        std::vector<std::pair<int, double>> one, slowest{{T, 1}};
        for (int n = lo; n <= hi[p]; ++n) {
          if (g[p][n] == kInf) continue;
          const int v = ilp.add_var(0, 1, 0, true);
          y[p].push_back({v, n});
          one.push_back({v, 1});
          total.push_back({v, n});
          slowest.push_back({v, -g[p][n]});
        }
        ilp.add_row(one, 1, 1);
        ilp.add_row(slowest, 0, kInfinity);
      }
      ilp.add_row(total, N, N);
      ++milps;
      const auto v = ilp.minimize();
      if (!v) return std::nullopt;
      for (int p = 0; p < D; ++p) {
        n_of[p] = 0;
        for (const auto& [var, n] : y[p]) {
          if ((*v)[var] > 0.5) n_of[p] = n;
        }
        HSPMD_ASSERT(n_of[p] > 0 && tabs[p].at(n_of[p])) << "micro-batch program left pipeline " << p << " empty";
      }
    }
    sharding::Strategy st;
    st.name = planner.options_.name;
    st.zero1 = planner.options_.zero1;
    for (int p = 0; p < D; ++p) {
      sharding::PipelineSpec pipe;
      pipe.micro_batch_size = b;
      pipe.num_micro_batches = n_of[p];
      int layer = 0;
      const std::vector<int>& split = tabs[p].at(n_of[p])->line.layers;
      for (size_t j = 0; j < c.pipelines[p].size(); ++j) {
        sharding::StageSpec s;
        s.ranks = c.pipelines[p][j].ranks;
        s.first_layer = layer;
        s.last_layer = layer + split[j] - 1;
        layer += split[j];
        pipe.stages.push_back(s);
      }
      st.pipelines.push_back(pipe);
    }
    return st;
  }
};

Planner::Planner(const models::LlamaConfig& config, const resolve::Topology& topology, const Profile& profile,
                 PlannerOptions options)
    : config_(config),
      topology_(topology),
      profile_(profile),
      options_(std::move(options)),
      cost_(config, topology, profile, {.seq_len = options_.seq_len, .schedule = options_.schedule}) {
  HSPMD_CHECK(options_.global_batch > 0) << "planner: the global batch must be positive, got " << options_.global_batch;
  for (int b : options_.micro_batch_sizes) {
    HSPMD_CHECK(b > 0 && options_.global_batch % b == 0)
        << "planner: micro-batch size " << b << " does not divide the global batch " << options_.global_batch;
  }
  for (int r : options_.devices) {
    HSPMD_CHECK(r >= 0 && r < topology_.num_devices())
        << "planner: rank " << r << " is not in cluster " << topology_.name() << " (" << topology_.num_devices()
        << " devices)";
  }
}

double Planner::moved_bytes(const sharding::Strategy& previous, const sharding::Strategy& next) const {
  // Where each rank was: its layers (with -1 for the embedding, L for the head) and TP degree.
  std::map<int, std::pair<std::set<int>, int>> held;
  const int L = static_cast<int>(cost_.shape().layers);
  for (const auto& pipe : previous.pipelines) {
    for (size_t j = 0; j < pipe.stages.size(); ++j) {
      const auto& s = pipe.stages[j];
      for (int r : s.ranks) {
        auto& [layers, tp] = held[r];
        tp = s.tp();
        for (int l = s.first_layer; l <= s.last_layer; ++l) layers.insert(l);
        if (j == 0) layers.insert(-1);
        if (j + 1 == pipe.stages.size()) layers.insert(L);
      }
    }
  }
  const int D = static_cast<int>(next.pipelines.size());
  double moved = 0;
  for (const auto& pipe : next.pipelines) {
    for (size_t j = 0; j < pipe.stages.size(); ++j) {
      const auto& s = pipe.stages[j];
      const DeviceKindProfile& k = profile_.kind(cost_.stage_kind(s.ranks));
      const double per_param = k.bytes_per_parameter + k.zero_bytes_per_parameter / (next.zero1 ? D : 1);
      std::vector<std::pair<int, double>> parts;
      for (int l = s.first_layer; l <= s.last_layer; ++l) parts.push_back({l, cost_.shape().layer_parameters});
      if (j == 0) parts.push_back({-1, cost_.shape().embedding_parameters});
      if (j + 1 == pipe.stages.size()) parts.push_back({L, cost_.shape().head_parameters});
      for (int r : s.ranks) {
        auto it = held.find(r);
        for (const auto& [l, params] : parts) {
          const bool kept = it != held.end() && it->second.second == s.tp() && it->second.first.count(l);
          if (!kept) moved += params / s.tp() * per_param;
        }
      }
    }
  }
  return moved;
}

Plan Planner::run(const std::vector<int>& available, const sharding::Strategy* previous) const {
  const auto start = std::chrono::steady_clock::now();
  Search search(*this, available);
  search.keep_tp = options_.tp_per_kind;
  if (previous) {
    for (const auto& pipe : previous->pipelines) {
      search.keep_micro_batch_sizes.push_back(pipe.micro_batch_size);
      for (const auto& s : pipe.stages) {
        for (int r : s.ranks) {
          if (r < topology_.num_devices()) search.keep_tp[topology_.device(r).type] = s.tp();
        }
      }
    }
    auto& sizes = search.keep_micro_batch_sizes;
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    std::erase_if(sizes, [&](int b) { return options_.global_batch % b != 0; });
  }
  const std::vector<Candidate> candidates = search.candidates();
  Plan best;
  best.prediction.step_seconds = kInf;
  struct Found {
    sharding::Strategy strategy;
    Prediction prediction;
  };
  std::vector<Found> found;
  const double slack = previous ? 1 + options_.replan_tolerance : 1;
  int solved = 0;
  for (const Candidate& c : candidates) {
    if (c.bound >= best.prediction.step_seconds * slack) break;
    ++solved;
    std::optional<sharding::Strategy> st = search.solve(c);
    if (!st) continue;
    Prediction p = cost_.predict(*st);
    if (!p.fits) continue;
    if (p.step_seconds < best.prediction.step_seconds) {
      best.strategy = *st;
      best.prediction = p;
    }
    if (previous) found.push_back({std::move(*st), std::move(p)});
  }
  if (best.prediction.step_seconds == kInf) {
    // Refuse with the figures: what the model's states need against what the devices have.
    const ModelShape& m = cost_.shape();
    const double params = m.layers * m.layer_parameters + m.embedding_parameters + m.head_parameters;
    double total_memory = 0, largest = 0, need = 0;
    for (int r : available) {
      const resolve::DeviceSpec& d = topology_.device(r);
      total_memory += d.memory;
      largest = std::max(largest, d.memory);
      const DeviceKindProfile& k = profile_.kind(d.type);
      need = std::max(need, params * (k.bytes_per_parameter + k.zero_bytes_per_parameter / available.size()));
    }
    HSPMD_THROW() << "planner: no plan fits in memory (" << candidates.size() << " pipeline configurations tried). The model has "
                  << params / 1e9 << " billion parameters, one decoder layer " << m.layer_parameters / 1e6
                  << " million; weights, gradients and optimizer states need at least "
                  << specialize::human_bytes(need) << " even with every state sharded over all " << available.size()
                  << " devices, before activations of " << options_.seq_len << "-token sequences; the devices have "
                  << specialize::human_bytes(total_memory) << " in all, the largest "
                  << specialize::human_bytes(largest) << ". Add devices, shorten the sequences or use a smaller model";
  }
  if (previous) {
    double least = kInf;
    for (const Found& f : found) {
      if (f.prediction.step_seconds > best.prediction.step_seconds * slack) continue;
      const double moved = moved_bytes(*previous, f.strategy);
      if (moved < least) {
        least = moved;
        best.strategy = f.strategy;
        best.prediction = f.prediction;
      }
    }
    best.moved_bytes = least;
  }
  // Why each usable rank is left out.
  const std::vector<int> used = best.strategy.ranks();
  std::map<std::string, int> tp_of;
  for (const auto& pipe : best.strategy.pipelines) {
    for (const auto& s : pipe.stages) tp_of[topology_.device(s.ranks.front()).type] = s.tp();
  }
  for (int r : available) {
    if (std::binary_search(used.begin(), used.end(), r)) continue;
    const resolve::DeviceSpec& d = topology_.device(r);
    std::ostringstream why;
    why << "rank " << r << " (" << d.type << ", node " << d.node << "): ";
    if (!tp_of.count(d.type)) {
      why << "every " << d.type << " left idle: the plan is predicted faster without them";
    } else {
      why << "left over on node " << d.node << " after its TP-" << tp_of[d.type] << " groups of " << d.type;
    }
    best.idle.push_back(why.str());
  }
  best.candidates = static_cast<int>(candidates.size());
  best.candidates_solved = solved;
  best.milps = search.milps;
  best.planning_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return best;
}

Plan Planner::plan() const {
  std::vector<int> devices = options_.devices;
  if (devices.empty()) {
    for (int r = 0; r < topology_.num_devices(); ++r) devices.push_back(r);
  }
  return run(devices, nullptr);
}

Plan Planner::replan(const sharding::Strategy& previous, const std::vector<int>& available) const {
  HSPMD_CHECK(!available.empty()) << "replan: no ranks available";
  for (int r : available) {
    HSPMD_CHECK(r >= 0 && r < topology_.num_devices())
        << "replan: rank " << r << " is not in cluster " << topology_.name() << " (" << topology_.num_devices()
        << " devices)";
  }
  std::vector<int> devices = available;
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  return run(devices, &previous);
}

std::string describe_plan(const Plan& plan) {
  std::ostringstream s;
  s.precision(4);
  const sharding::Strategy& st = plan.strategy;
  s << st.ranks().size() << " ranks in " << st.pipelines.size() << " pipeline" << (st.pipelines.size() == 1 ? "" : "s")
    << ", ZeRO-1 " << (st.zero1 ? "on" : "off") << "\n";
  for (size_t p = 0; p < st.pipelines.size(); ++p) {
    const auto& pipe = st.pipelines[p];
    const auto& pred = plan.prediction.pipelines[p];
    s << "  pipeline " << p << ": " << pipe.num_micro_batches << " x micro-batch " << pipe.micro_batch_size << ", "
      << pred.end_seconds << " s:";
    for (size_t j = 0; j < pipe.stages.size(); ++j) {
      const auto& stage = pipe.stages[j];
      s << (j ? " ->" : "") << " [" << join_ranks(stage.ranks) << "] " << pred.stages[j].kind << " TP"
        << stage.tp() << " layers " << stage.first_layer << "-" << stage.last_layer;
    }
    s << "\n";
  }
  return s.str();
}

}  // namespace hspmd::planner
