#include "hspmd/planner/mixed_length_planner.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "hspmd/planner/cost_model.h"
#include "hspmd/planner/dispatcher.h"

namespace hspmd::planner {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Ranks of one device kind, node by node.
struct Kind {
  std::string name;
  std::map<int, std::vector<int>> by_node;  // node -> ranks (ascending)
  int count = 0;
};

// A parallel method: t x s devices of one kind, one pipeline.
struct Method {
  size_t kind = 0;
  int tp = 1, pp = 1;
  PipelineModel model;
  int size() const { return tp * pp; }
};

// Per-node free ranks of every kind, from which TP groups are taken inside one node.
class Allocator {
 public:
  explicit Allocator(const std::vector<Kind>& kinds) : kinds_(kinds), next_(kinds.size()) {}
  // One TP group of t ranks of kind k inside a node; empty when none is left.
  std::vector<int> take(size_t k, int t) {
    for (const auto& [node, ranks] : kinds_[k].by_node) {
      size_t& next = next_[k][node];
      if (ranks.size() - next >= static_cast<size_t>(t)) {
        std::vector<int> group;
        for (int i = 0; i < t; ++i) group.push_back(ranks[next + static_cast<size_t>(i)]);
        next += static_cast<size_t>(t);
        return group;
      }
    }
    return {};
  }

 private:
  const std::vector<Kind>& kinds_;
  std::vector<std::map<int, size_t>> next_;  // kind -> node -> ranks taken
};

// One pipeline of method `m` on ranks from `alloc` (empty when they ran out).
std::optional<sharding::PipelineSpec> build_pipeline(const Method& m, int layers, Allocator& alloc, int micro_batches) {
  sharding::PipelineSpec p;
  p.micro_batch_size = 1;
  p.num_micro_batches = std::max(1, micro_batches);
  int first = 0;
  for (int j = 0; j < m.pp; ++j) {
    const int n = layers / m.pp + (j < layers % m.pp ? 1 : 0);
    sharding::StageSpec s;
    s.ranks = alloc.take(m.kind, m.tp);
    if (s.ranks.empty()) return std::nullopt;
    s.first_layer = first;
    s.last_layer = first + n - 1;
    first += n;
    p.stages.push_back(std::move(s));
  }
  return p;
}

// The expected sequences of a step in buckets [a, b): tokens, squares, longest.
struct Load {
  double tokens = 0, squares = 0;
  int64_t longest = 0;
};

// Predicted seconds of `copies` pipelines of `m` sharing `load` (equal micro-batches of at most
// the method's micro-batch tokens), plus its sync and optimizer.
double interval_seconds(const Method& m, const Load& load, int copies) {
  if (load.tokens <= 0) return 0;
  const double tokens = load.tokens / copies, squares = load.squares / copies;
  const double n = std::max(1.0, std::ceil(tokens / static_cast<double>(m.model.micro_batch_tokens)));
  double sum = 0, worst = 0;
  for (const StageTimeModel& s : m.model.stages) {
    const double f = s.seconds(squares / n, tokens / n);
    sum += f;
    worst = std::max(worst, f);
  }
  return n * worst + (sum - worst) + m.model.tail_seconds;
}

struct DpChoice {
  double seconds = kInf;
  int next = 0;       // the interval ends before bucket `next`
  int method = -1;    // -1: no sequences in the interval
  int copies = 0;
};

class Program {
 public:
  Program(const std::vector<Kind>& kinds, const std::vector<Method>& methods, const std::vector<std::vector<Load>>& loads,
          int buckets)
      : kinds_(kinds), methods_(methods), loads_(loads), buckets_(buckets) {}

  // The best plan of buckets [i, buckets_) with `used` devices per kind already taken.
  double best(int i, std::vector<int>& used) {
    if (i == buckets_) return 0;
    auto key = std::make_pair(i, used);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second.seconds;
    DpChoice c;
    for (int j = i + 1; j <= buckets_; ++j) {
      const Load& load = loads_[i][j];
      if (load.tokens <= 0) {
        const double rest = best(j, used);
        if (rest < c.seconds) c = {rest, j, -1, 0};
        continue;
      }
      for (size_t mi = 0; mi < methods_.size(); ++mi) {
        const Method& m = methods_[mi];
        if (load.longest > m.model.max_tokens) continue;
        const int room = (kinds_[m.kind].count - used[m.kind]) / m.size();
        for (int copies = 1; copies <= room; ++copies) {
          const double here = interval_seconds(m, load, copies);
          if (here >= c.seconds) continue;
          used[m.kind] += copies * m.size();
          const double total = std::max(here, best(j, used));
          used[m.kind] -= copies * m.size();
          if (total < c.seconds) c = {total, j, static_cast<int>(mi), copies};
        }
      }
    }
    memo_[key] = c;
    return c.seconds;
  }
  const DpChoice& choice(int i, const std::vector<int>& used) const { return memo_.at({i, used}); }

 private:
  const std::vector<Kind>& kinds_;
  const std::vector<Method>& methods_;
  const std::vector<std::vector<Load>>& loads_;
  int buckets_;
  std::map<std::pair<int, std::vector<int>>, DpChoice> memo_;
};

}  // namespace

std::string MixedLengthPlan::to_string() const {
  std::ostringstream out;
  out << "heterogeneous strategy " << heterogeneous.name << ": predicted " << predicted_seconds << " s per step\n";
  for (const MixedLengthInterval& i : intervals) {
    out << "  lengths [" << i.low << ", " << i.high << "): " << i.copies << " x (" << i.kind << ", TP " << i.tp
        << " x PP " << i.pp << "), " << i.seconds << " s\n";
  }
  for (const LengthStrategy& s : per_max_length) {
    out << "  strategy " << s.strategy.name << " for batches up to " << s.max_len << " tokens: "
        << s.strategy.pipelines.size() << " pipeline(s) on " << s.strategy.ranks().size() << " ranks\n";
  }
  return out.str();
}

MixedLengthPlan plan_mixed_length(const models::Model& model, const resolve::Topology& topology,
                                  const Profile& profile, const std::vector<std::pair<int64_t, uint64_t>>& lengths,
                                  const MixedLengthOptions& options) {
  HSPMD_CHECK(!lengths.empty()) << "mixed-length planner: the dataset has no segment";
  HSPMD_CHECK(options.seq_len > 0 && options.global_batch_tokens > 0)
      << "mixed-length planner: seq_len and global_batch_tokens must be positive";
  const int layers = model.num_layers();
  const CostModel cm(model, topology, profile, {.seq_len = options.seq_len});

  // Device kinds and methods.
  std::vector<Kind> kinds;
  for (int r = 0; r < topology.num_devices(); ++r) {
    const resolve::DeviceSpec& d = topology.device(r);
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const Kind& k) { return k.name == d.type; });
    if (it == kinds.end()) it = kinds.insert(kinds.end(), Kind{d.type, {}, 0});
    it->by_node[d.node].push_back(r);
    ++it->count;
  }
  std::vector<Method> methods;
  for (size_t k = 0; k < kinds.size(); ++k) {
    if (!profile.devices.count(kinds[k].name)) continue;
    for (const auto& [tp, unused] : profile.kind(kinds[k].name).tp) {
      bool fits_nodes = true;
      for (const auto& [node, ranks] : kinds[k].by_node) fits_nodes = fits_nodes && ranks.size() % tp == 0;
      if (!fits_nodes) continue;
      for (int pp = 1; pp <= std::min(layers, 8); pp *= 2) {
        if (tp * pp > kinds[k].count) break;
        Method m{k, tp, pp, {}};
        Allocator alloc(kinds);
        const auto pipe = build_pipeline(m, layers, alloc, 1);
        if (!pipe) continue;
        sharding::Strategy one{"method", false, false, {*pipe}};
        m.model = pipeline_models(cm, one, {.seq_len = options.seq_len}).at(0);
        if (m.model.max_tokens >= 2) methods.push_back(std::move(m));
      }
    }
  }

  // Doubling buckets up to seq_len, and the expected load of a step in every range of them.
  double total_tokens = 0;
  for (const auto& [l, c] : lengths) total_tokens += static_cast<double>(l) * static_cast<double>(c);
  const double scale = static_cast<double>(options.global_batch_tokens) / total_tokens;
  const int64_t longest = lengths.back().first;
  const int buckets = std::bit_width(static_cast<uint64_t>(std::max<int64_t>(longest, 1)));  // [2^k, 2^(k+1)), k < buckets
  std::vector<std::vector<Load>> loads(buckets + 1, std::vector<Load>(buckets + 1));
  for (int i = 0; i < buckets; ++i) {
    for (int j = i + 1; j <= buckets; ++j) {
      Load& load = loads[i][j];
      for (const auto& [l, c] : lengths) {
        const int b = std::bit_width(static_cast<uint64_t>(std::max<int64_t>(l, 1))) - 1;
        if (b < i || b >= j) continue;
        const double n = static_cast<double>(c) * scale;
        load.tokens += n * static_cast<double>(l);
        load.squares += n * static_cast<double>(l) * static_cast<double>(l);
        load.longest = std::max(load.longest, l);
      }
    }
  }

  // One program per maximum-length bucket: buckets [0, upto).
  auto solve = [&](int upto, const std::string& name, MixedLengthPlan* detail) {
    Program program(kinds, methods, loads, upto);
    std::vector<int> used(kinds.size(), 0);
    const double seconds = program.best(0, used);
    if (!std::isfinite(seconds)) {
      HSPMD_THROW() << "mixed-length planner: no parallel method on cluster " << topology.name()
                    << " holds the segments of up to " << loads[0][upto].longest << " tokens (" << methods.size()
                    << " methods tried: every device kind x profiled TP degree x 1, 2, 4, 8 stages)";
    }
    // Walk the choices; allocate ranks with the widest TP groups first so nodes do not fragment.
    struct Picked {
      int from, to, method, copies;
      double seconds;
    };
    std::vector<Picked> picked;
    for (int i = 0; i < upto;) {
      const DpChoice& c = program.choice(i, used);
      if (c.method >= 0) {
        picked.push_back({i, c.next, c.method, c.copies, interval_seconds(methods[c.method], loads[i][c.next], c.copies)});
        used[methods[c.method].kind] += c.copies * methods[c.method].size();
      }
      i = c.next;
    }
    std::vector<size_t> order(picked.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return methods[picked[a].method].tp > methods[picked[b].method].tp; });
    Allocator alloc(kinds);
    sharding::Strategy st{name, false, false, {}};
    std::vector<std::vector<sharding::PipelineSpec>> pipes(picked.size());
    for (size_t o : order) {
      const Picked& p = picked[o];
      const Method& m = methods[p.method];
      const double mbs = std::ceil(loads[p.from][p.to].tokens / p.copies / static_cast<double>(m.model.micro_batch_tokens));
      for (int c = 0; c < p.copies; ++c) {
        auto pipe = build_pipeline(m, layers, alloc, static_cast<int>(mbs));
        HSPMD_CHECK(pipe.has_value()) << "mixed-length planner: ranks of kind " << kinds[m.kind].name
                                      << " ran out while placing TP " << m.tp << " groups (nodes fragmented)";
        pipes[o].push_back(*pipe);
      }
    }
    for (size_t i = 0; i < picked.size(); ++i) {
      for (auto& pipe : pipes[i]) st.pipelines.push_back(std::move(pipe));
      if (detail) {
        const Method& m = methods[picked[i].method];
        detail->intervals.push_back({int64_t{1} << picked[i].from, std::min<int64_t>(int64_t{1} << picked[i].to, options.seq_len + 1),
                                     kinds[m.kind].name, m.tp, m.pp, picked[i].copies, picked[i].seconds});
      }
    }
    st.validate(layers);
    if (detail) detail->predicted_seconds = seconds;
    return st;
  };

  MixedLengthPlan plan;
  plan.heterogeneous = solve(buckets, options.name, &plan);
  // Strategies for the three longest buckets' maximum lengths (batches rarely hold only the
  // shortest sequences, so lower buckets would seldom be chosen).
  for (int upto = std::max(1, buckets - 2); upto <= buckets; ++upto) {
    if (loads[0][upto].tokens <= 0) continue;
    const int64_t max_len = upto == buckets ? std::max(options.seq_len, longest) : loads[0][upto].longest;
    if (!plan.per_max_length.empty() && plan.per_max_length.back().max_len >= max_len) continue;
    plan.per_max_length.push_back({max_len, solve(upto, options.name + "-max" + std::to_string(max_len), nullptr)});
  }
  return plan;
}

}  // namespace hspmd::planner
