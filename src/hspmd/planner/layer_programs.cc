#include "hspmd/planner/layer_programs.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <limits>

#include "hspmd/core/error.h"
#include "hspmd/planner/milp.h"
#include "hspmd/planner/pipeline_floor.h"

namespace hspmd::planner {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

LayerPrograms::LayerPrograms(const CostModel& c, const PlannerOptions& o, std::shared_ptr<LayerProgramsShared> shared)
    : cost(c),
      options(o),
      shape(c.shape()),
      layers(static_cast<int>(c.shape().layers)),
      shared_(shared ? std::move(shared) : std::make_shared<LayerProgramsShared>()) {}

std::pair<double, double> LayerPrograms::ring_link(const std::vector<int>& ring) {
  auto& links = shared_->ring_links;
  auto it = links.find(ring);
  if (it == links.end()) it = links.emplace(ring, cost.collective_link(ring)).first;
  return it->second;
}

// A group's layer, ends (its TP collectives read every pair of its ranks' links) and memory: found
// once per group and size, as the same groups recur in candidate after candidate.
const LayerPrograms::GroupCosts& LayerPrograms::group_costs(const Group& g, int b, bool first, bool last) {
  // Packed: 12 bits of size, 10 of CP degree, 18 of micro-batch size, 2 of ends.
  HSPMD_CHECK(g.ranks.size() < (1 << 12) && g.cp < (1 << 10) && b < (1 << 18))
      << "planner: group of " << g.ranks.size() << " ranks, CP " << g.cp << ", micro-batch " << b
      << " beyond the group memo's key";
  const int64_t key = (static_cast<int64_t>(g.ranks.front()) << 42) | (static_cast<int64_t>(g.ranks.size()) << 30) |
                      (static_cast<int64_t>(g.cp) << 20) | (static_cast<int64_t>(b) << 2) | (first ? 2 : 0) |
                      (last ? 1 : 0);
  auto& memo = shared_->group_costs;
  auto it = memo.find(key);
  if (it != memo.end() && it->second.ranks == g.ranks) return it->second;
  GroupCosts k;
  k.ranks = g.ranks;
  // Times the faster of SP and not whenever the planner may write SP (pipeline_search.h's bounds);
  // memory (memory()) with SP only where this search writes it.
  const bool sp = options.search_sequence_parallel && g.tp() > 1;
  k.per_layer = layer_seconds(cost, g, b, sp);
  const double ends_comm = cost.ends_tp_comm(g.ranks, first, last, b, g.cp);
  k.ends = (last ? cost.stage_compute(g.kind, g.tp(), 0, true, b, g.cp) : 0) +
           (sp ? std::min(ends_comm, cost.ends_tp_comm(g.ranks, first, last, b, g.cp, true)) : ends_comm);
  k.capacity = kInf;
  for (int r : g.ranks) {
    const double m = cost.topology().device(r).memory;
    if (m > 0) k.capacity = std::min(k.capacity, m);
  }
  if (it != memo.end()) {
    uncached_ = std::move(k);  // another group of the same key: priced, not cached
    return uncached_;
  }
  return memo.emplace(key, std::move(k)).first->second;
}

// Stage lines of pipeline p of candidate c.
std::vector<LayerPrograms::StageLine> LayerPrograms::stage_lines(
    const Candidate& c, size_t p, const std::vector<std::pair<double, double>>& rings) {
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
    const GroupCosts& k = group_costs(g, b, s.first, s.last);
    s.per_layer = k.per_layer;
    s.fixed = k.ends + (s.last ? 0 : cost.p2p(g.ranks.front(), pipe[j + 1].ranks.front(), b, s.cp));
    s.capacity = k.capacity;
    s.floor_per_layer = s.per_layer;
    s.floor_fixed = s.fixed;
    if (zero3) {
      s.per_layer += cost.zero3_comm(g.kind, D * s.cp, rings[j], 1, false, false, s.tp);
      s.fixed += cost.zero3_comm(g.kind, D * s.cp, rings[j], 0, s.first, s.last, s.tp);
      // predict() gathers each layer over its holders in every pipeline, not over stage index j's
      // ring: where the pipelines split the layers differently, a layer's holders may sit on a
      // faster link or have fewer CP ranks (pipeline_floor_test's 64-GPU cluster: an H800 stage whose
      // last layers another pipeline holds on its node, 0.59 s a micro-batch in predict(), 0.68 s
      // on this line). Any such ring has one rank per pipeline at least, on a link at most
      // ring_bound's (level 1's bound, pipeline_search.cc), latency aside: solution_floor's
      // gathers. Pipelines of one type need none: they run equal counts, so equal splits, and
      // predict()'s ring of a layer holds stage index j's ranks, n = D x CP, no faster a link.
      const std::pair<double, double> fastest{ring_bound.at_most(D), 0};
      s.floor_per_layer += cost.zero3_comm(g.kind, D, fastest, 1, false, false, s.tp);
      s.floor_fixed += cost.zero3_comm(g.kind, D, fastest, 0, s.first, s.last, s.tp);
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

double LayerPrograms::tail_floor(const StageLine& s, int x, int D) const {
  const bool zero1 = options.zero1, zero3 = options.zero1 && options.zero3;
  const int replicas = D * s.cp;
  const double params = shape.stage_parameters(x, s.first, s.last) / s.tp;
  const std::pair<double, double> link{ring_bound.at_most(replicas), 0};
  // Without gradient buckets the whole reduce is exposed (ZeRO-1/2: a reduce-scatter and an
  // all-gather, an all-reduce's bytes); with them, ZeRO-1/2's parameter all-gather after the passes.
  double sync = 0;
  if (!zero3 && replicas > 1) {
    if (cost.options().grad_bucket_mb <= 0) {
      sync = CostModel::ring_allreduce(replicas, link, params * 4);
    } else if (zero1) {
      sync = CostModel::ring_allgather(replicas, link, params * 4);
    }
  }
  return sync + cost.profile().kind(s.kind).optimizer_seconds_per_parameter * params / (zero1 ? replicas : 1);
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
  // Memory enters the program only through `most`, capped at the layers a stage can hold at all:
  // other memory settings (a ZeRO stage) with the same effective limits reuse the solution.
  SplitKey key{st, m, most};
  for (int& cap : key.most) cap = std::min(cap, layers - (S - 1));
  const auto [memo, added] = shared_->splits.try_emplace(std::move(key));
  if (!added) return memo->second;
  const std::vector<int>& cap = memo->first.most;
  std::optional<SplitLine>& solved = memo->second;
  const int z = ilp.add_var(0, kInfinity, m, false);
  const int w = ilp.add_var(0, kInfinity, 1, false);
  std::vector<std::pair<int, double>> sum;
  for (int j = 0; j < S; ++j) {
    x[j] = ilp.add_var(1, cap[j], st[j].per_layer, true);
    sum.push_back({x[j], 1});
    ilp.add_row({{z, 1}, {x[j], -st[j].per_layer}}, st[j].fixed, kInfinity);
    ilp.add_row({{w, 1}, {x[j], -st[j].tail_per_layer}}, st[j].tail_fixed, kInfinity);
  }
  ilp.add_row(sum, layers, layers);
  ++milps_;
  const auto v = ilp.minimize();
  if (!v) return std::nullopt;
  SplitLine& line = solved.emplace();
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
  TableKey key{max_n, b, D, st};
  auto it = tables.find(key);
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
  tables.emplace(std::move(key), t);
  return t;
}

// The micro-batch program over windows lo_k <= n <= hi_k per type (lo_k from the other pipelines'
// room, hi_sum = sum over pipelines of hi b): how many pipelines of each type run n micro-batches,
// sum n b = the global batch, minimizing the slowest pipeline. A type of one pipeline takes binaries
// y_n (it runs n); a type of m pipelines integer counts z_n <= m with a binary u_n >= z_n / m that
// charges its time to the slowest: the variables grow with the types and windows, not with D.
// None when infeasible.
std::optional<std::vector<std::map<int, int>>> LayerPrograms::program(const std::vector<PipelineType>& types,
                                                                     const std::vector<int>& hi, int64_t hi_sum) {
  const int64_t B = options.global_batch;
  Milp ilp;
  const int T = ilp.add_var(0, kInfinity, 1, false);
  std::vector<std::pair<int, double>> total;
  std::vector<std::vector<std::pair<int, int>>> z(types.size());  // (count var, n)
  for (size_t k = 0; k < types.size(); ++k) {
    const PipelineType& t = types[k];
    const int m = static_cast<int>(t.members.size());
    const int64_t others = hi_sum - static_cast<int64_t>(hi[k]) * t.b;
    const int lo = static_cast<int>(std::max<int64_t>(1, (B - others + t.b - 1) / t.b));
    std::vector<std::pair<int, double>> all, slowest{{T, 1}};
    for (int n = lo; n <= hi[k]; ++n) {
      if (t.g[n] == kInf) continue;
      const int v = ilp.add_var(0, m, 0, true);
      z[k].push_back({v, n});
      all.push_back({v, 1});
      total.push_back({v, static_cast<double>(n) * t.b});
      if (m == 1) {
        slowest.push_back({v, -t.g[n]});
      } else {
        const int u = ilp.add_var(0, 1, 0, true);
        ilp.add_row({{v, 1}, {u, -static_cast<double>(m)}}, -kInfinity, 0);
        ilp.add_row({{T, 1}, {u, -t.g[n]}}, 0, kInfinity);
      }
    }
    if (all.empty()) return std::nullopt;
    ilp.add_row(all, m, m);
    if (m == 1) ilp.add_row(slowest, 0, kInfinity);
  }
  ilp.add_row(total, static_cast<double>(B), static_cast<double>(B));
  ++milps_;
  const auto v = ilp.minimize();
  if (!v) return std::nullopt;
  std::vector<std::map<int, int>> out(types.size());
  for (size_t k = 0; k < types.size(); ++k) {
    for (const auto& [var, n] : z[k]) {
      const int count = static_cast<int>(std::lround((*v)[var]));
      if (count > 0) out[k][n] = count;
    }
  }
  return out;
}

double LayerPrograms::relaxed_bound(const std::vector<PipelineType>& types) const {
  const int64_t B = options.global_batch;
  std::vector<PipelineFloor> floors;
  floors.reserve(types.size());
  for (const PipelineType& type : types) {
    // The pipeline's passes and its slowest stage's tail over its stages' lines (PipelineFloor:
    // the sum, the bottleneck and the tail of one split).
    std::vector<StageClass> stages;
    for (const StageLine& s : type.lines) {
      stages.push_back({1, s.per_layer, s.fixed, layers, s.tail_floor_per_layer, s.tail_floor_fixed});
    }
    floors.emplace_back(stages, layers);
  }
  if (types.size() == 1 && types[0].members.size() == 1) return floors[0].at(B / types[0].b);
  std::vector<std::pair<const PipelineFloor*, int64_t>> weighted;
  for (size_t k = 0; k < types.size(); ++k) {
    weighted.push_back({&floors[k], static_cast<int64_t>(types[k].members.size()) * types[k].b});
  }
  return least_step(weighted, B);
}

std::optional<sharding::Strategy> LayerPrograms::solve(const Candidate& c, double prune_at) {
  const int D = static_cast<int>(c.pipelines.size());
  const std::vector<int>& b = c.micro_batch_sizes;
  const int64_t B = options.global_batch;  // sequences, sum_p n_p b_p
  int64_t all_sizes = 0;
  for (int p = 0; p < D; ++p) all_sizes += b[p];
  // The gradient ring of stage index j: that stage (or the nearest) of every pipeline; with one
  // pipeline, the stage's own CP ranks (its ranks' link: the ring of D x CP = CP replicas; with CP 1
  // there is nothing to reduce and the link is never read).
  size_t most_stages = 0;
  for (const auto& pipe : c.pipelines) most_stages = std::max(most_stages, pipe.size());
  std::vector<std::pair<double, double>> rings;
  for (size_t j = 0; j < most_stages; ++j) {
    std::vector<int> ring;
    for (const auto& other : c.pipelines) ring.push_back(other[std::min(j, other.size() - 1)].ranks.front());
    if (D > 1) {
      rings.push_back(ring_link(ring));
    } else {
      const Group& own = c.pipelines[0][j];
      rings.push_back(own.cp > 1 ? ring_link(own.ranks) : std::pair<double, double>{1, 0});
    }
  }
  // The pipelines by type (equal stage lines and size). A pipeline's most micro-batches: every other
  // pipeline runs at least one (the same for every pipeline of a size).
  std::vector<PipelineType> types;
  std::vector<int> type_of(D);
  for (int p = 0; p < D; ++p) {
    const int max_n = static_cast<int>((B - (all_sizes - b[p])) / b[p]);
    if (max_n < 1) return std::nullopt;
    std::vector<StageLine> lines = stage_lines(c, p, rings);
    // A linear scan: the types are few (a handful where D is in the hundreds).
    int k = 0;
    while (k < static_cast<int>(types.size()) && (types[k].b != b[p] || types[k].lines != lines)) ++k;
    if (k == static_cast<int>(types.size())) types.push_back({std::move(lines), b[p], max_n, {}, {}});
    type_of[p] = k;
    types[k].members.push_back(p);
  }
  // Nothing fits in memory (a split, or the micro-batch counts' windows).
  auto dropped_by_memory = [&]() -> std::optional<sharding::Strategy> {
    memory_dropped_bound_ = std::min(memory_dropped_bound_, c.bound);
    return std::nullopt;
  };
  if (prune_at < kInf && relaxed_bound(types) >= prune_at) {
    ++relaxation_pruned_;
    return std::nullopt;
  }
  std::vector<PipelineTable> tabs;
  for (const PipelineType& t : types) {
    tabs.push_back(table(t.lines, t.max_n, t.b, D));
    if (tabs.back().pieces.empty()) return dropped_by_memory();
  }
  std::vector<int> n_of(D, static_cast<int>(B / b[0]));
  if (D == 1 && B % b[0]) return std::nullopt;
  if (D == 1 && !tabs[0].at(n_of[0])) return dropped_by_memory();
  if (D > 1 && options.zero1 && options.zero3) {
    // ZeRO-3 runs only pipelines of equal micro-batch counts (sharding::Strategy::validate): each
    // runs B / sum_p b_p.
    if (B % all_sizes) return std::nullopt;
    n_of.assign(D, static_cast<int>(B / all_sizes));
    for (int p = 0; p < D; ++p) {
      if (!tabs[type_of[p]].at(n_of[p])) return dropped_by_memory();
    }
  } else if (D > 1) {
    // g(n) for every type and count (kInf: does not fit).
    std::vector<double> values;
    for (size_t k = 0; k < types.size(); ++k) {
      std::vector<double>& g = types[k].g;
      g.assign(types[k].max_n + 1, kInf);
      for (int n = 1; n <= types[k].max_n; ++n) {
        if (const Piece* piece = tabs[k].at(n)) g[n] = piece->line.at(n - 1);
        if (g[n] < kInf) values.push_back(g[n]);
      }
    }
    // Preprocessing: g grows with n, so the optimum is at least T*, the least value at which the
    // pipelines can take B sequences between them; a solution that runs lo_p <= n_p <= hi_p = the
    // most micro-batches pipeline p finishes within T* is optimal when one exists (always with one
    // micro-batch size; with several, the sizes may not add up to B there, and then every count is
    // open to the program).
    // g is non-decreasing in n (inf past what fits), so the count within T is a binary search.
    auto most_within = [&](size_t k, double T) {
      const std::vector<double>& g = types[k].g;
      return static_cast<int>(std::upper_bound(g.begin() + 1, g.end(), T) - (g.begin() + 1));
    };
    auto enough = [&](double T) {
      int64_t sum = 0;
      for (size_t k = 0; k < types.size(); ++k) {
        const int m = most_within(k, T);
        if (m == 0) return false;
        sum += static_cast<int64_t>(m) * types[k].b * static_cast<int64_t>(types[k].members.size());
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
    std::vector<int> hi(types.size());
    int64_t hi_sum = 0;
    for (size_t k = 0; k < types.size(); ++k) {
      hi[k] = most_within(k, least_enough);
      hi_sum += static_cast<int64_t>(hi[k]) * types[k].b * static_cast<int64_t>(types[k].members.size());
    }
    // One micro-batch size: the counts within T* add up to at least B / b, and any of them can give
    // up micro-batches (a pipeline's time only falls) down to one each, so taking the surplus off
    // the slowest pipelines first reaches the optimum T* without a program.
    const bool one_size = std::all_of(b.begin(), b.end(), [&](int x) { return x == b[0]; });
    bool counted = false;
    if (one_size && B % b[0] == 0) {
      std::vector<int> n(D);
      for (int p = 0; p < D; ++p) n[p] = hi[type_of[p]];
      int64_t surplus = hi_sum / b[0] - B / b[0];
      std::priority_queue<std::pair<double, int>> slowest;  // (g(n_p), -p): ties to the lower pipeline
      for (int p = 0; p < D; ++p) {
        if (n[p] > 1) slowest.push({types[type_of[p]].g[n[p]], -p});
      }
      while (surplus > 0 && !slowest.empty()) {
        const int p = -slowest.top().second;
        slowest.pop();
        --n[p];
        --surplus;
        if (n[p] > 1) slowest.push({types[type_of[p]].g[n[p]], -p});
      }
      if (surplus == 0) {
        n_of = n;
        counted = true;
      }
    }
    if (!counted) {
      std::optional<std::vector<std::map<int, int>>> counts = program(types, hi, hi_sum);
      if (!counts) {
        for (size_t k = 0; k < types.size(); ++k) hi[k] = types[k].max_n;
        counts = program(types, hi, std::numeric_limits<int64_t>::max() / 2);
      }
      if (!counts) return dropped_by_memory();
      // The pipelines of a type take its counts in order: they are interchangeable.
      for (size_t k = 0; k < types.size(); ++k) {
        size_t at = 0;
        for (const auto& [n, pipes] : (*counts)[k]) {
          for (int i = 0; i < pipes && at < types[k].members.size(); ++i) n_of[types[k].members[at++]] = n;
        }
        HSPMD_ASSERT(at == types[k].members.size()) << "micro-batch program left a pipeline of type " << k << " without a count";
      }
    }
    for (int p = 0; p < D; ++p) {
      HSPMD_ASSERT(n_of[p] > 0 && tabs[type_of[p]].at(n_of[p])) << "micro-batch program left pipeline " << p << " empty";
    }
  }
  solution_floor_ = 0;
  const bool one_type = types.size() == 1;  // the lines' ZeRO-3 gathers at most predict()'s (stage_lines)
  for (int p = 0; p < D; ++p) {
    const std::vector<StageLine>& lines = types[type_of[p]].lines;
    const std::vector<int>& split = tabs[type_of[p]].at(n_of[p])->line.layers;
    double sum = 0, slowest = 0, tail = 0;
    for (size_t j = 0; j < lines.size(); ++j) {
      const StageLine& s = lines[j];
      const double f = one_type ? s.per_layer * split[j] + s.fixed : s.floor_per_layer * split[j] + s.floor_fixed;
      sum += f;
      slowest = std::max(slowest, f);
      tail = std::max(tail, tail_floor(lines[j], split[j], D));
    }
    solution_floor_ = std::max(solution_floor_, sum + (n_of[p] - 1) * slowest + tail);
  }
  sharding::Strategy st;
  st.name = options.name;
  st.zero = !options.zero1 ? 0 : options.zero3 ? 3 : options.zero2 ? 2 : 1;
  for (int p = 0; p < D; ++p) {
    sharding::PipelineSpec pipe;
    pipe.micro_batch_size = b[p];
    pipe.num_micro_batches = n_of[p];
    int layer = 0;
    const std::vector<int>& split = tabs[type_of[p]].at(n_of[p])->line.layers;
    for (size_t j = 0; j < c.pipelines[p].size(); ++j) {
      sharding::StageSpec s;
      s.ranks = c.pipelines[p][j].ranks;
      s.cp = c.pipelines[p][j].cp;
      s.sequence_parallel = options.sequence_parallel && s.tp() > 1;
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
