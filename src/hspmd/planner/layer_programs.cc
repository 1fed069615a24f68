#include "hspmd/planner/layer_programs.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <limits>
#include <sstream>

#include "hspmd/core/error.h"
#include "hspmd/planner/milp.h"

namespace hspmd::planner {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

LayerPrograms::LayerPrograms(const CostModel& c, const PlannerOptions& o)
    : cost(c), options(o), shape(c.shape()), layers(static_cast<int>(c.shape().layers)) {}

// Stage lines of pipeline p of candidate c.
std::vector<LayerPrograms::StageLine> LayerPrograms::stage_lines(
    const Candidate& c, size_t p, const std::vector<std::pair<double, double>>& rings) const {
  const auto& pipe = c.pipelines[p];
  const int D = static_cast<int>(c.pipelines.size());
  const int b = c.micro_batch_sizes[p];
  const bool zero1 = options.zero1, zero3 = options.zero1 && options.zero3;
  std::vector<StageLine> out;
  for (size_t j = 0; j < pipe.size(); ++j) {
    const Group& g = pipe[j];
    StageLine s;
    s.kind = g.kind;
    s.tp = g.tp();
    s.cp = g.cp;
    s.first = j == 0;
    s.last = j + 1 == pipe.size();
    // Times with SP whenever the planner may write it (never slower: pipeline_search.h's bounds);
    // memory (memory()) with SP only where this search writes it.
    const bool sp = options.search_sequence_parallel && s.tp > 1;
    s.per_layer = layer_seconds(cost, g, b, sp);
    s.fixed = (s.last ? cost.stage_compute(g.kind, s.tp, 0, true, b, s.cp)
                      : cost.p2p(g.ranks.front(), pipe[j + 1].ranks.front(), b, s.cp)) +
              cost.ends_tp_comm(g.ranks, s.first, s.last, b, s.cp, sp);
    if (zero3) {
      s.per_layer += cost.zero3_comm(g.kind, D * s.cp, rings[j], 1, false, false, s.tp);
      s.fixed += cost.zero3_comm(g.kind, D * s.cp, rings[j], 0, s.first, s.last, s.tp);
    }
    // Replicas: the D pipelines x the stage's CP ranks (the ring's link from the pipelines'). The
    // split is chosen on the whole reduce; predict() prices what the buckets hide.
    const bool overlap = cost.options().grad_bucket_mb > 0;
    auto tail = [&](int x, bool floor) {
      const double params = shape.stage_parameters(x, s.first, s.last) / s.tp;
      double sync = 0;
      if (!zero3 && (!floor || !overlap)) sync = CostModel::ring_allreduce(D * s.cp, rings[j], params * 4);
      if (!zero3 && floor && overlap && zero1) sync = CostModel::ring_allgather(D * s.cp, rings[j], params * 4);
      return sync + cost.profile().kind(g.kind).optimizer_seconds_per_parameter * params / (zero1 ? D * s.cp : 1);
    };
    s.tail_per_layer = tail(2, false) - tail(1, false);
    s.tail_fixed = tail(1, false) - s.tail_per_layer;
    s.tail_floor_per_layer = tail(2, true) - tail(1, true);
    s.tail_floor_fixed = tail(1, true) - s.tail_floor_per_layer;
    s.capacity = kInf;
    for (int r : g.ranks) {
      const double m = cost.topology().device(r).memory;
      if (m > 0) s.capacity = std::min(s.capacity, m);
    }
    out.push_back(s);
  }
  return out;
}

double LayerPrograms::memory(const StageLine& s, int x, int b, int in_flight, int D) const {
  // ZeRO-2 is priced as if each micro-batch were a gradient group of its own; the cost model's check
  // of the whole strategy prices pipelines of more micro-batches as they are.
  return cost.stage_memory(s.kind, s.tp, x, s.first, s.last, b, in_flight, D, options.zero1, s.cp,
                           options.zero1 && options.zero2, options.sequence_parallel && s.tp > 1,
                           options.zero1 && options.zero3)
      .total();
}

// The best split for m = n - 1 with in_flight[j] micro-batches in flight per stage, or none.
std::optional<LayerPrograms::SplitLine> LayerPrograms::best_split(const std::vector<StageLine>& st, double m,
                                                                 const std::vector<int>& in_flight, int b, int D) {
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
  // Up to three stages, every split is priced directly (at most L^2 / 2 of them, cheaper than a
  // program); the first of the least objective wins.
  if (S <= 3) {
    std::vector<int> best_x;
    double best_objective = kInf;
    std::vector<int> xs(S);
    auto price = [&] {
      double sum = 0, most_f = 0, tail = 0;
      for (int j = 0; j < S; ++j) {
        const double f = st[j].per_layer * xs[j] + st[j].fixed;
        sum += f;
        most_f = std::max(most_f, f);
        tail = std::max(tail, st[j].tail_per_layer * xs[j] + st[j].tail_fixed);
      }
      const double objective = sum + m * most_f + tail;
      if (objective < best_objective) {
        best_objective = objective;
        best_x = xs;
      }
    };
    if (S == 1) {
      xs[0] = layers;
      if (layers <= most[0]) price();
    } else {
      for (int a = 1; a <= most[0] && a < layers; ++a) {
        xs[0] = a;
        if (S == 2) {
          xs[1] = layers - a;
          if (xs[1] <= most[1]) price();
          continue;
        }
        for (int c = 1; c <= most[1] && a + c < layers; ++c) {
          xs[1] = c;
          xs[2] = layers - a - c;
          if (xs[2] <= most[2]) price();
        }
      }
    }
    if (best_x.empty()) return std::nullopt;
    SplitLine line;
    double tail = 0;
    for (int j = 0; j < S; ++j) {
      line.layers.push_back(best_x[j]);
      const double f = st[j].per_layer * best_x[j] + st[j].fixed;
      line.A += f;
      line.B = std::max(line.B, f);
      tail = std::max(tail, st[j].tail_per_layer * best_x[j] + st[j].tail_fixed);
    }
    line.A += tail;
    return line;
  }
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
  ++milps_;
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
LayerPrograms::PipelineTable LayerPrograms::table(const std::vector<StageLine>& st, int max_n, int b, int D) {
  std::ostringstream key;
  key.precision(17);
  key << max_n << "/" << b << "/" << D;
  for (const StageLine& s : st) {
    key << "|" << s.kind << "," << s.tp << "," << s.cp << "," << s.first << s.last << "," << s.per_layer << "," << s.fixed << ","
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

// The micro-batch program over windows lo_p <= n <= hi_p (lo_p from the other pipelines' room,
// hi_sum = sum_p hi_p b_p): binary y_pn = pipeline p runs n micro-batches,
// sum_pn n b_p y_pn = the global batch, minimizing the slowest pipeline. None when infeasible.
std::optional<std::vector<int>> LayerPrograms::program(const std::vector<std::vector<double>>& g,
                                                       const std::vector<int>& b, const std::vector<int>& hi,
                                                       int64_t hi_sum) {
  const int D = static_cast<int>(g.size());
  const int64_t B = options.global_batch;
  Milp ilp;
  const int T = ilp.add_var(0, kInfinity, 1, false);
  std::vector<std::pair<int, double>> total;
  std::vector<std::vector<std::pair<int, int>>> y(D);  // (var, n)
  for (int p = 0; p < D; ++p) {
    const int64_t others = hi_sum - static_cast<int64_t>(hi[p]) * b[p];
    const int lo = static_cast<int>(std::max<int64_t>(1, (B - others + b[p] - 1) / b[p]));
    std::vector<std::pair<int, double>> one, slowest{{T, 1}};
    for (int n = lo; n <= hi[p]; ++n) {
      if (g[p][n] == kInf) continue;
      const int v = ilp.add_var(0, 1, 0, true);
      y[p].push_back({v, n});
      one.push_back({v, 1});
      total.push_back({v, static_cast<double>(n) * b[p]});
      slowest.push_back({v, -g[p][n]});
    }
    if (one.empty()) return std::nullopt;
    ilp.add_row(one, 1, 1);
    ilp.add_row(slowest, 0, kInfinity);
  }
  ilp.add_row(total, static_cast<double>(B), static_cast<double>(B));
  ++milps_;
  const auto v = ilp.minimize();
  if (!v) return std::nullopt;
  std::vector<int> n_of(D, 0);
  for (int p = 0; p < D; ++p) {
    for (const auto& [var, n] : y[p]) {
      if ((*v)[var] > 0.5) n_of[p] = n;
    }
  }
  return n_of;
}

// Level 2 for one candidate: the strategy, or none when nothing fits.
namespace {

// The least Z with sum_j floor((Z - fixed_j) / per_j) >= total and every term >= 1: the smallest
// bottleneck max_j (per_j x_j + fixed_j) of integer x_j >= 1 summing to `total` (no upper limits).
// Starts at the real-valued optimum and steps through the breakpoints per_j x + fixed_j; the
// shortfall there is under one unit a stage, so the steps are at most the stages.
double least_integer_bottleneck(const std::vector<std::pair<double, double>>& lines, double total) {
  double inv = 0, weighted = 0, one = 0;
  for (const auto& [per, fixed] : lines) {
    inv += 1 / per;
    weighted += fixed / per;
    one = std::max(one, per + fixed);
  }
  double Z = std::max(one, (total + weighted) / inv);
  for (size_t step = 0; step <= 4 * lines.size() + 4; ++step) {
    double count = 0, next = kInf;
    for (const auto& [per, fixed] : lines) {
      // The small tolerance keeps a breakpoint reached by arithmetic on its own side.
      const double x = std::floor((Z - fixed) / per * (1 + 1e-12) + 1e-12);
      count += x;
      next = std::min(next, per * (x + 1) + fixed);
    }
    if (count >= total) return Z;
    Z = next;
  }
  return Z;  // not reached: a safe (lower) value if it were
}

}  // namespace

double LayerPrograms::relaxed_bound(const std::vector<std::vector<StageLine>>& lines,
                                    const std::vector<int>& b) const {
  const int D = static_cast<int>(lines.size());
  const double B = static_cast<double>(options.global_batch), L = layers;
  std::vector<double> K(D), Z(D);
  for (int p = 0; p < D; ++p) {
    const std::vector<StageLine>& st = lines[p];
    const double S = static_cast<double>(st.size());
    double least = kInf, sum = 0, w_one = 0;
    bool tail_grows = true;
    std::vector<std::pair<double, double>> f, tail;
    for (const StageLine& s : st) {
      least = std::min(least, s.per_layer);
      sum += s.per_layer + s.fixed;  // every stage holds a layer
      w_one = std::max(w_one, s.tail_floor_per_layer + s.tail_floor_fixed);
      f.push_back({s.per_layer, s.fixed});
      tail.push_back({s.tail_floor_per_layer, s.tail_floor_fixed});
      tail_grows = tail_grows && s.tail_floor_per_layer > 0;
    }
    // Sum of the stages: the layers beyond one a stage on the fastest. Bottleneck and slowest sync:
    // each at its own least over integer splits.
    sum += (L - S) * least;
    Z[p] = least_integer_bottleneck(f, L);
    const double W = tail_grows ? least_integer_bottleneck(tail, L) : w_one;
    K[p] = sum + W;  // g_p(n) = K_p + (n - 1) Z_p bounds pipeline p's time from below
  }
  if (D == 1) return K[0] + (B / b[0] - 1) * Z[0];
  // The least T at which the pipelines can take B sequences: pipeline p runs at most
  // n_p(T) = floor((T - K_p) / Z_p) + 1 micro-batches within T. From the real-valued T, step
  // through the breakpoints K_p + (n - 1) Z_p.
  double slope = 0, offset = 0, T = 0;
  for (int p = 0; p < D; ++p) {
    slope += b[p] / Z[p];
    offset += b[p] * (K[p] / Z[p] - 1);
    T = std::max(T, K[p]);  // every pipeline runs a micro-batch
  }
  T = std::max(T, (B + offset) / slope);
  for (int step = 0; step <= 4 * D + 4; ++step) {
    double taken = 0, next = kInf;
    for (int p = 0; p < D; ++p) {
      const double n = std::floor((T - K[p]) / Z[p] * (1 + 1e-12) + 1e-12) + 1;
      taken += b[p] * n;
      next = std::min(next, K[p] + n * Z[p]);
    }
    if (taken >= B) return T;
    T = next;
  }
  return T;
}

std::optional<sharding::Strategy> LayerPrograms::solve(const Candidate& c, double prune_at) {
  const int D = static_cast<int>(c.pipelines.size());
  const std::vector<int>& b = c.micro_batch_sizes;
  const int64_t B = options.global_batch;  // sequences, sum_p n_p b_p
  int64_t all_sizes = 0;
  for (int p = 0; p < D; ++p) all_sizes += b[p];
  // The most micro-batches pipeline p can run: every other pipeline runs at least one.
  std::vector<int> max_n(D);
  for (int p = 0; p < D; ++p) max_n[p] = static_cast<int>((B - (all_sizes - b[p])) / b[p]);
  // The gradient ring of stage index j: that stage (or the nearest) of every pipeline.
  size_t most_stages = 0;
  for (const auto& pipe : c.pipelines) most_stages = std::max(most_stages, pipe.size());
  std::vector<std::pair<double, double>> rings;
  for (size_t j = 0; j < most_stages; ++j) {
    std::vector<int> ring;
    for (const auto& other : c.pipelines) ring.push_back(other[std::min(j, other.size() - 1)].ranks.front());
    rings.push_back(D > 1 ? cost.collective_link(ring) : std::pair<double, double>{1, 0});
  }
  std::vector<std::vector<StageLine>> lines;
  for (int p = 0; p < D; ++p) {
    if (max_n[p] < 1) return std::nullopt;
    lines.push_back(stage_lines(c, p, rings));
  }
  // Nothing fits in memory (a split, or the micro-batch counts' windows).
  auto dropped_by_memory = [&]() -> std::optional<sharding::Strategy> {
    memory_dropped_bound_ = std::min(memory_dropped_bound_, c.bound);
    return std::nullopt;
  };
  if (prune_at < kInf && relaxed_bound(lines, b) >= prune_at) {
    ++relaxation_pruned_;
    return std::nullopt;
  }
  std::vector<PipelineTable> tabs;
  for (int p = 0; p < D; ++p) {
    tabs.push_back(table(lines[p], max_n[p], b[p], D));
    if (tabs.back().pieces.empty()) return dropped_by_memory();
  }
  std::vector<int> n_of(D, static_cast<int>(B / b[0]));
  if (D == 1 && B % b[0]) return std::nullopt;
  if (D == 1 && !tabs[0].at(n_of[0])) return dropped_by_memory();
  if (D > 1) {
    // g_p(n) for every pipeline and count (kInf: does not fit).
    std::vector<std::vector<double>> g(D);
    std::vector<double> values;
    for (int p = 0; p < D; ++p) {
      g[p].assign(max_n[p] + 1, kInf);
      for (int n = 1; n <= max_n[p]; ++n) {
        if (const Piece* k = tabs[p].at(n)) g[p][n] = k->line.at(n - 1);
        if (g[p][n] < kInf) values.push_back(g[p][n]);
      }
    }
    // Preprocessing: g_p grows with n, so the optimum is at least T*, the least value at which the
    // pipelines can take B sequences between them; a solution that runs lo_p <= n_p <= hi_p = the
    // most micro-batches pipeline p finishes within T* is optimal when one exists (always with one
    // micro-batch size; with several, the sizes may not add up to B there, and then every count is
    // open to the program).
    // g_p is non-decreasing in n (inf past what fits), so the count within T is a binary search.
    auto most_within = [&](int p, double T) {
      return static_cast<int>(std::upper_bound(g[p].begin() + 1, g[p].end(), T) - (g[p].begin() + 1));
    };
    auto enough = [&](double T) {
      int64_t sum = 0;
      for (int p = 0; p < D; ++p) {
        const int m = most_within(p, T);
        if (m == 0) return false;
        sum += static_cast<int64_t>(m) * b[p];
      }
      return sum >= B;
    };
    // T*: the least value at which the pipelines take B, by selection (nth_element halves the pool
    // each round; `enough` is monotone) instead of sorting every value.
    double least_enough = kInf;
    for (auto lo = values.begin(), hi = values.end(); lo != hi;) {
      const auto mid = lo + (hi - lo) / 2;
      std::nth_element(lo, mid, hi);
      if (enough(*mid)) {
        least_enough = *mid;
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    if (least_enough == kInf) return dropped_by_memory();
    const auto it = &least_enough;
    std::vector<int> hi(D);
    int64_t hi_sum = 0;
    for (int p = 0; p < D; ++p) hi_sum += static_cast<int64_t>(hi[p] = most_within(p, *it)) * b[p];
    // One micro-batch size: the counts within T* add up to at least B / b, and any of them can give
    // up micro-batches (a pipeline's time only falls) down to one each, so taking the surplus off
    // the slowest pipelines first reaches the optimum T* without a program.
    const bool one_size = std::all_of(b.begin(), b.end(), [&](int x) { return x == b[0]; });
    std::optional<std::vector<int>> counts;
    if (one_size && B % b[0] == 0) {
      std::vector<int> n(hi);
      int64_t surplus = hi_sum / b[0] - B / b[0];
      std::priority_queue<std::pair<double, int>> slowest;  // (g_p(n_p), -p): ties to the lower pipeline
      for (int p = 0; p < D; ++p) {
        if (n[p] > 1) slowest.push({g[p][n[p]], -p});
      }
      while (surplus > 0 && !slowest.empty()) {
        const int p = -slowest.top().second;
        slowest.pop();
        --n[p];
        --surplus;
        if (n[p] > 1) slowest.push({g[p][n[p]], -p});
      }
      if (surplus == 0) counts = n;
    }
    if (!counts) counts = program(g, b, hi, hi_sum);
    if (!counts) {
      for (int p = 0; p < D; ++p) hi[p] = max_n[p];
      counts = program(g, b, hi, std::numeric_limits<int64_t>::max() / 2);
    }
    if (!counts) return dropped_by_memory();
    n_of = *counts;
    for (int p = 0; p < D; ++p) {
      HSPMD_ASSERT(n_of[p] > 0 && tabs[p].at(n_of[p])) << "micro-batch program left pipeline " << p << " empty";
    }
  }
  sharding::Strategy st;
  st.name = options.name;
  st.zero = !options.zero1 ? 0 : options.zero3 ? 3 : options.zero2 ? 2 : 1;
  for (int p = 0; p < D; ++p) {
    sharding::PipelineSpec pipe;
    pipe.micro_batch_size = b[p];
    pipe.num_micro_batches = n_of[p];
    int layer = 0;
    const std::vector<int>& split = tabs[p].at(n_of[p])->line.layers;
    for (size_t j = 0; j < c.pipelines[p].size(); ++j) {
      sharding::StageSpec s;
      s.ranks = c.pipelines[p][j].ranks;
      s.cp = c.pipelines[p][j].cp;
      s.sequence_parallel = options.sequence_parallel && cost.sequence_parallel_applies(s.tp(), s.cp, b[p]);
      s.first_layer = layer;
      s.last_layer = layer + split[j] - 1;
      layer += split[j];
      pipe.stages.push_back(s);
    }
    st.pipelines.push_back(pipe);
  }
  return st;
}

}  // namespace hspmd::planner
