#include "hspmd/planner/mixed_length_planner.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <sstream>
#include <unordered_map>

#include "hspmd/planner/cost_model.h"

namespace hspmd::planner {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Ranks of every device kind, node by node (ascending).
using KindNodes = std::vector<std::map<int, std::vector<int>>>;

// Per-node free ranks of every kind, from which a stage's t x c ranks are taken inside one node.
class Allocator {
 public:
  explicit Allocator(const KindNodes& kinds) : kinds_(kinds), next_(kinds.size()) {}
  // `n` consecutive free ranks of kind k inside a node; empty when no node has them.
  std::vector<int> take(size_t k, int n) {
    for (const auto& [node, ranks] : kinds_[k]) {
      size_t& next = next_[k][node];
      if (ranks.size() - next >= static_cast<size_t>(n)) {
        std::vector<int> group;
        for (int i = 0; i < n; ++i) group.push_back(ranks[next + static_cast<size_t>(i)]);
        next += static_cast<size_t>(n);
        return group;
      }
    }
    return {};
  }

 private:
  const KindNodes& kinds_;
  std::vector<std::map<int, size_t>> next_;  // kind -> node -> ranks taken
};

// One pipeline of method `m` on ranks from `alloc` (none when they ran out).
std::optional<sharding::PipelineSpec> build_pipeline(const ParallelMethod& m, int layers, Allocator& alloc,
                                                     int micro_batches) {
  sharding::PipelineSpec p;
  p.micro_batch_size = m.micro_batch_size;
  p.num_micro_batches = std::max(1, micro_batches);
  int first = 0;
  for (int j = 0; j < m.pp; ++j) {
    const int n = layers / m.pp + (j < layers % m.pp ? 1 : 0);
    sharding::StageSpec s;
    s.ranks = alloc.take(static_cast<size_t>(m.kind_index), m.tp * m.cp);
    if (s.ranks.empty()) return std::nullopt;
    s.cp = m.cp;
    s.sequence_parallel = m.sequence_parallel;
    s.first_layer = first;
    s.last_layer = first + n - 1;
    first += n;
    p.stages.push_back(std::move(s));
  }
  return p;
}

// The time of one pipeline of a method taking a share x of an interval's work: micro-batches of
// equal load, n = max(1, x tokens / micro-batch tokens) of them. Below one micro-batch's worth the
// single micro-batch grows with x; above, n grows with x at a fixed load per micro-batch. Both
// pieces are linear in x and meet at x_break:
//   t(x) = at_zero + below x                          x <= x_break
//        = at_zero + below x_break + above (x - x_break)  x >= x_break
struct ShareTime {
  double at_zero = 0, below = 0, x_break = 1, above = 0;
  double at(double x) const {
    return x <= x_break ? at_zero + below * x : at_zero + below * x_break + above * (x - x_break);
  }
  // The largest share finished by `seconds` (0 before at_zero, at most 1).
  double share_by(double seconds) const {
    if (seconds <= at_zero) return 0;
    const double at_break = at(x_break);
    double x = seconds <= at_break ? (below > 0 ? (seconds - at_zero) / below : x_break)
                                   : (above > 0 ? x_break + (seconds - at_break) / above : 1.0);
    return std::min(1.0, x);
  }
};

ShareTime share_time(const PipelineModel& m, const LengthLoad& load) {
  ShareTime t;
  t.at_zero = m.tail_seconds;
  for (const StageTimeModel& s : m.stages) {
    t.at_zero += s.constant;
    t.below += s.quadratic * load.squares + s.linear * load.tokens;
  }
  const double mbt = static_cast<double>(m.micro_batch_tokens);
  t.x_break = std::min(1.0, mbt / load.tokens);
  // A full micro-batch: mbt tokens with the interval's squares per token.
  double worst = 0;
  for (const StageTimeModel& s : m.stages) worst = std::max(worst, s.seconds(load.squares * mbt / load.tokens, mbt));
  t.above = worst * load.tokens / mbt;
  return t;
}

// The balanced time of pipelines (copies of each ShareTime) sharing one interval: the least T at
// which their shares finished by T add up to 1. The sum of shares is nondecreasing and piecewise
// linear in T with breaks at each pipeline's start, break and end, so T lies exactly between the
// last break short of 1 and the first at or past it (found by bisection over the sorted breaks).
// `breaks` is scratch space (the dynamic program calls this millions of times).
double balanced_seconds(std::span<const std::pair<ShareTime, int>> pipes, std::vector<double>& breaks) {
  if (pipes.size() == 1) return pipes[0].first.at(1.0 / pipes[0].second);  // copies of one method share evenly
  breaks.clear();
  for (const auto& [t, copies] : pipes) {
    breaks.push_back(t.at_zero);
    breaks.push_back(t.at(t.x_break));
    breaks.push_back(t.at(1.0));
  }
  std::sort(breaks.begin(), breaks.end());
  const auto done = [&](double seconds) {
    double sum = 0;
    for (const auto& [t, copies] : pipes) sum += copies * t.share_by(seconds);
    return sum;
  };
  // The first break with done >= 1 (the last always is: every pipeline has finished a whole share).
  size_t lo = 0, hi = breaks.size() - 1;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (done(breaks[mid]) >= 1) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  if (lo == 0) return breaks[0];
  const double b = breaks[lo], d = done(b), a = breaks[lo - 1], done_a = done(a);
  if (b <= a || d <= done_a) return b;
  return a + (b - a) * (1 - done_a) / (d - done_a);  // linear between the two breaks
}

}  // namespace

std::string ParallelMethod::to_string() const {
  std::ostringstream out;
  out << kind << " TP " << tp << " x CP " << cp << " x PP " << pp << ", micro-batches of " << model.micro_batch_tokens
      << " tokens";
  if (sequence_parallel) out << ", sequence parallel";
  if (zero1_copies > 1) out << ", ZeRO-1 over " << zero1_copies << "+ copies";
  return out.str();
}

MixedLengthSpace::MixedLengthSpace(const models::Model& model, const resolve::Topology& topology,
                                   const Profile& profile, const std::vector<std::pair<int64_t, uint64_t>>& lengths,
                                   const MixedLengthOptions& options)
    : topology_(topology), options_(options), layers_(model.num_layers()) {
  HSPMD_CHECK(!lengths.empty()) << "mixed-length planner: the dataset has no segment";
  HSPMD_CHECK(options.seq_len > 0 && options.global_batch_tokens > 0)
      << "mixed-length planner: seq_len and global_batch_tokens must be positive";
  HSPMD_CHECK(options.methods_per_interval >= 1)
      << "mixed-length planner: methods_per_interval must be at least 1, got " << options.methods_per_interval;
  const CostModel cm(model, topology, profile, {.seq_len = options.seq_len, .grad_bucket_mb = options.grad_bucket_mb});

  KindNodes nodes;
  for (int r = 0; r < topology.num_devices(); ++r) {
    const resolve::DeviceSpec& d = topology.device(r);
    auto it = std::find(kinds_.begin(), kinds_.end(), d.type);
    if (it == kinds_.end()) {
      it = kinds_.insert(kinds_.end(), d.type);
      kind_devices_.push_back(0);
      nodes.emplace_back();
    }
    const size_t k = static_cast<size_t>(it - kinds_.begin());
    nodes[k][d.node].push_back(r);
    ++kind_devices_[k];
  }
  for (size_t k = 0; k < kinds_.size(); ++k) {
    if (!profile.devices.count(kinds_[k])) continue;
    for (const auto& [tp, unused] : profile.kind(kinds_[k]).tp) {
      if (!cm.shape().tp_divides(tp)) continue;
      for (int c : options.cp_degrees) {
        // Groups of t x c devices tile every node of the kind: placed widest first, they never
        // fragment a node (all sizes are powers of two dividing the node's devices).
        const int group = tp * c;
        bool tiles = std::has_single_bit(static_cast<unsigned>(group));
        for (const auto& [node, ranks] : nodes[k]) tiles = tiles && ranks.size() % static_cast<size_t>(group) == 0;
        if (!tiles) continue;
        for (int pp : options.pipeline_degrees) {
          if (pp > layers_ || group * pp > kind_devices_[k]) continue;
          ParallelMethod m;
          m.kind = kinds_[k];
          m.kind_index = static_cast<int>(k);
          m.tp = tp;
          m.cp = c;
          m.pp = pp;
          // Sequence parallelism (TP > 1) frees activation memory and splits the work TP duplicates;
          // ZeRO-1 over k copies frees optimizer memory: each k (1: without) whose copies fit the
          // kind and that holds longer sequences than fewer copies (with SP alike) is a method. Each
          // micro-batch size is priced on its own: the gradient sync the buckets hide depends on
          // the backward pass of one micro-batch.
          for (const bool sp : {false, true}) {
            if (sp && (tp == 1 || !options.sequence_parallel)) continue;
            m.sequence_parallel = sp;
            int64_t previous_max = 0;
            for (int copies = 1; copies * group * pp <= kind_devices_[k]; copies *= 2) {
              m.zero1_copies = copies;
              int64_t previous_tokens = 0, held = 0;
              for (int b : options.micro_batch_sizes) {
                m.micro_batch_size = b;
                Allocator alloc(nodes);
                std::vector<sharding::PipelineSpec> pipes;
                for (int i = 0; i < copies; ++i) {
                  if (auto pipe = build_pipeline(m, layers_, alloc, 1)) pipes.push_back(std::move(*pipe));
                }
                if (static_cast<int>(pipes.size()) < copies) break;
                const sharding::Strategy together{"method", copies > 1 ? 1 : 0, false, std::move(pipes)};
                m.model = pipeline_models(cm, together, {.seq_len = options.seq_len}).at(0);
                if (m.model.max_tokens < 2 || m.model.max_tokens <= previous_max) break;
                held = m.model.max_tokens;
                // A larger size the memory caps at the same tokens is the same method.
                if (m.model.micro_batch_tokens == previous_tokens) continue;
                previous_tokens = m.model.micro_batch_tokens;
                methods_.push_back(m);
              }
              if (held > 0) previous_max = held;
            }
          }
        }
      }
    }
  }

  // Doubling buckets, and the expected load of a step in every range of them.
  double total_tokens = 0;
  for (const auto& [l, c] : lengths) total_tokens += static_cast<double>(l) * static_cast<double>(c);
  const double scale = static_cast<double>(options.global_batch_tokens) / total_tokens;
  const int64_t longest = lengths.back().first;
  buckets_ = std::bit_width(static_cast<uint64_t>(std::max<int64_t>(longest, 1)));
  loads_.assign(buckets_ + 1, std::vector<LengthLoad>(buckets_ + 1));
  for (int i = 0; i < buckets_; ++i) {
    for (int j = i + 1; j <= buckets_; ++j) {
      LengthLoad& load = loads_[i][j];
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
}

bool MixedLengthSpace::holds(int method, int from, int to) const {
  return methods_[method].model.max_tokens >= loads_[from][to].longest;
}

double MixedLengthSpace::interval_seconds(int from, int to, const std::vector<MethodCopies>& pipelines,
                                          std::vector<double>* shares) const {
  const LengthLoad& load = loads_[from][to];
  if (shares) shares->assign(pipelines.size(), 0.0);
  if (load.tokens <= 0) return 0;
  HSPMD_CHECK(!pipelines.empty()) << "mixed-length planner: an interval with sequences needs a pipeline";
  std::vector<std::pair<ShareTime, int>> pipes;
  for (const MethodCopies& mc : pipelines) {
    HSPMD_CHECK(holds(mc.method, from, to)) << "mixed-length planner: method " << methods_[mc.method].to_string()
                                            << " does not hold sequences of " << load.longest << " tokens";
    pipes.push_back({share_time(methods_[mc.method].model, load), mc.copies});
  }
  std::vector<double> breaks;
  const double seconds = balanced_seconds(pipes, breaks);
  if (shares) {
    for (size_t i = 0; i < pipes.size(); ++i) (*shares)[i] = pipes[i].first.share_by(seconds);
  }
  return seconds;
}

int MixedLengthSpace::micro_batches(int method, int from, int to, double share) const {
  const double tokens = share * loads_[from][to].tokens;
  return std::max(1, static_cast<int>(std::ceil(tokens / static_cast<double>(methods_[method].model.micro_batch_tokens) - 1e-9)));
}

namespace {

struct DpChoice {
  double seconds = kInf;
  int next = 0;                       // the interval ends before bucket `next`
  std::vector<MethodCopies> pipelines;  // empty: no sequences in the interval
};

// The dynamic program over (first bucket, devices used per kind).
class Program {
 public:
  Program(const MixedLengthSpace& space, int buckets) : space_(space), buckets_(buckets) {
    int64_t states = 1;
    for (size_t k = 0; k < space.kinds().size(); ++k) {
      stride_.push_back(states);
      states *= space.kind_devices(static_cast<int>(k)) + 1;
    }
    states_ = states;
  }

  // The best plan of buckets [i, buckets_) with `used` devices per kind already taken.
  double best(int i, std::vector<int>& used) {
    if (i == buckets_) return 0;
    const int64_t key = key_of(i, used);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second.seconds;
    DpChoice c;
    for (int j = i + 1; j <= buckets_; ++j) {
      if (space_.load(i, j).tokens <= 0) {
        const double rest = best(j, used);
        if (rest < c.seconds) c = {rest, j, {}};
        continue;
      }
      const Candidates& candidates = candidates_of(i, j);
      std::vector<std::pair<ShareTime, int>> pick;
      std::vector<MethodCopies> picked;
      choose(i, j, candidates, 0, used, pick, picked, c);
    }
    return memo_.insert_or_assign(key, std::move(c)).first->second.seconds;
  }
  const DpChoice& choice(int i, const std::vector<int>& used) const { return memo_.at(key_of(i, used)); }

 private:
  // The methods worth trying on an interval, and their times on its work.
  struct Candidates {
    std::vector<int> methods;
    std::vector<ShareTime> times;
  };

  int64_t key_of(int i, const std::vector<int>& used) const {
    int64_t code = 0;
    for (size_t k = 0; k < used.size(); ++k) code += used[k] * stride_[k];
    return i * states_ + code;
  }

  // Every set of pipelines for interval [i, j): `pick` (methods ascending, every count of each;
  // `picked` names them) and one more method from candidates[from..] as its last entry. The last
  // entry's count n is not enumerated: the interval's time here(n) falls with n while the rest of
  // the plan, rest(n) = best(j, used + n devices), grows with it (fewer devices left never help),
  // so max(here, rest) is least at their crossing, found by bisection: the smallest n with
  // here(n) <= rest(n), or the one before it. This keeps the program exact (the enumeration test
  // checks it) and visits the later states only at the crossings.
  void choose(int i, int j, const Candidates& candidates, size_t from, std::vector<int>& used,
              std::vector<std::pair<ShareTime, int>>& pick, std::vector<MethodCopies>& picked, DpChoice& c) {
    const bool extend = static_cast<int>(pick.size()) + 1 < space_.options().methods_per_interval;
    for (size_t k = from; k < candidates.methods.size(); ++k) {
      const int method = candidates.methods[k];
      const ParallelMethod& m = space_.methods()[method];
      const int room = (space_.kind_devices(m.kind_index) - used[m.kind_index]) / m.devices();
      const int fewest = m.zero1_copies;
      if (room < fewest) continue;
      const auto here = [&](int n) {
        pick.push_back({candidates.times[k], n});
        const double v = balanced_seconds(pick, breaks_);
        pick.pop_back();
        return v;
      };
      const auto rest = [&](int n) {
        used[m.kind_index] += n * m.devices();
        const double v = best(j, used);
        used[m.kind_index] -= n * m.devices();
        return v;
      };
      const auto consider = [&](int n) {
        const double h = here(n);
        if (h >= c.seconds) return;
        const double total = std::max(h, rest(n));
        if (total < c.seconds) {
          c = {total, j, picked};
          c.pipelines.push_back({method, n});
        }
      };
      if (here(room) < c.seconds) {  // else no count of this method ends a better set
        int lo = fewest, hi = room;
        while (lo < hi) {
          const int mid = lo + (hi - lo) / 2;
          if (here(mid) <= rest(mid)) {
            hi = mid;
          } else {
            lo = mid + 1;
          }
        }
        consider(lo);
        if (lo > fewest) consider(lo - 1);
      }
      if (!extend) continue;
      for (int n = fewest; n <= room; ++n) {
        // Sets extending this one leave the rest of the plan no more devices than rest(n), which
        // only grows with n: once it reaches the best found, no larger count can do better.
        if (rest(n) >= c.seconds) break;
        used[m.kind_index] += n * m.devices();
        pick.push_back({candidates.times[k], n});
        picked.push_back({method, n});
        choose(i, j, candidates, k + 1, used, pick, picked, c);
        picked.pop_back();
        pick.pop_back();
        used[m.kind_index] -= n * m.devices();
      }
    }
  }

  // The methods worth trying on [i, j): those holding its longest sequence, less each one that
  // another of its kind on no more devices beats at every share (swapping it in never hurts).
  const Candidates& candidates_of(int i, int j) {
    auto key = std::make_pair(i, j);
    if (auto it = candidates_.find(key); it != candidates_.end()) return it->second;
    const LengthLoad& load = space_.load(i, j);
    const auto& methods = space_.methods();
    std::vector<int> holding;
    std::vector<ShareTime> times;
    for (int m = 0; m < static_cast<int>(methods.size()); ++m) {
      if (!space_.holds(m, i, j)) continue;
      holding.push_back(m);
      times.push_back(share_time(methods[m].model, load));
    }
    // a is no slower than b at every share: both are linear between 0, their breaks and 1.
    const auto no_slower = [&](size_t a, size_t b) {
      for (double x : {0.0, times[a].x_break, times[b].x_break, 1.0}) {
        if (times[a].at(x) > times[b].at(x)) return false;
      }
      return true;
    };
    Candidates kept;
    for (size_t b = 0; b < holding.size(); ++b) {
      const ParallelMethod& mb = methods[holding[b]];
      bool dominated = false;
      for (size_t a = 0; a < holding.size() && !dominated; ++a) {
        const ParallelMethod& ma = methods[holding[a]];
        // a must also be usable wherever b is: with no more copies.
        if (a == b || ma.kind_index != mb.kind_index || ma.devices() > mb.devices() ||
            ma.zero1_copies > mb.zero1_copies || !no_slower(a, b)) {
          continue;
        }
        // Equal methods: keep the one needing fewer copies, else the first.
        const bool equal = ma.devices() == mb.devices() && no_slower(b, a);
        dominated = !equal || ma.zero1_copies < mb.zero1_copies || a < b;
      }
      if (!dominated) {
        kept.methods.push_back(holding[b]);
        kept.times.push_back(times[b]);
      }
    }
    return candidates_[key] = std::move(kept);
  }

  const MixedLengthSpace& space_;
  int buckets_;
  std::vector<int64_t> stride_;  // per kind: its place in the code of `used`
  int64_t states_ = 1;           // codes of `used`
  std::unordered_map<int64_t, DpChoice> memo_;
  std::map<std::pair<int, int>, Candidates> candidates_;
  std::vector<double> breaks_;  // balanced_seconds' scratch
};

}  // namespace

std::string MixedLengthPlan::to_string() const {
  std::ostringstream out;
  out << "heterogeneous strategy " << heterogeneous.name << ": predicted " << predicted_seconds << " s per step\n";
  for (const MixedLengthInterval& i : intervals) {
    out << "  lengths [" << i.low << ", " << i.high << "): " << i.seconds << " s on";
    for (size_t k = 0; k < i.pipelines.size(); ++k) {
      out << (k ? " +" : "") << " " << i.pipelines[k].copies << " x (" << i.methods[k] << ", "
          << 100 * i.shares[k] << "% each)";
    }
    out << "\n";
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
  const MixedLengthSpace space(model, topology, profile, lengths, options);
  const auto& methods = space.methods();
  KindNodes nodes(space.kinds().size());
  for (int r = 0; r < topology.num_devices(); ++r) {
    const resolve::DeviceSpec& d = topology.device(r);
    const auto k = std::find(space.kinds().begin(), space.kinds().end(), d.type) - space.kinds().begin();
    nodes[static_cast<size_t>(k)][d.node].push_back(r);
  }

  // One program per maximum-length bucket: buckets [0, upto).
  auto solve = [&](int upto, const std::string& name, MixedLengthPlan* detail) {
    Program program(space, upto);
    std::vector<int> used(space.kinds().size(), 0);
    const double seconds = program.best(0, used);
    if (!std::isfinite(seconds)) {
      HSPMD_THROW() << "mixed-length planner: no parallel method on cluster " << topology.name()
                    << " holds the segments of up to " << space.load(0, upto).longest << " tokens ("
                    << methods.size()
                    << " methods tried: every device kind x profiled TP degree x CP degree x pipeline degree)";
    }
    struct Picked {
      int from, to;
      std::vector<MethodCopies> pipelines;
      std::vector<double> shares;
      double seconds;
    };
    std::vector<Picked> picked;
    for (int i = 0; i < upto;) {
      const DpChoice& c = program.choice(i, used);
      if (!c.pipelines.empty()) {
        Picked p{i, c.next, c.pipelines, {}, 0};
        p.seconds = space.interval_seconds(i, c.next, p.pipelines, &p.shares);
        for (const MethodCopies& mc : c.pipelines) used[methods[mc.method].kind_index] += mc.copies * methods[mc.method].devices();
        picked.push_back(std::move(p));
      }
      i = c.next;
    }
    // Place the widest groups first so that nodes do not fragment.
    struct Placement {
      size_t interval, entry;
    };
    std::vector<Placement> order;
    for (size_t i = 0; i < picked.size(); ++i) {
      for (size_t e = 0; e < picked[i].pipelines.size(); ++e) order.push_back({i, e});
    }
    const auto width = [&](const Placement& p) {
      const ParallelMethod& m = methods[picked[p.interval].pipelines[p.entry].method];
      return m.tp * m.cp;
    };
    std::stable_sort(order.begin(), order.end(), [&](const Placement& a, const Placement& b) { return width(a) > width(b); });
    Allocator alloc(nodes);
    std::vector<std::vector<std::vector<sharding::PipelineSpec>>> pipes(picked.size());
    for (size_t i = 0; i < picked.size(); ++i) pipes[i].resize(picked[i].pipelines.size());
    for (const Placement& pl : order) {
      const Picked& p = picked[pl.interval];
      const MethodCopies& mc = p.pipelines[pl.entry];
      const ParallelMethod& m = methods[mc.method];
      const int n = space.micro_batches(mc.method, p.from, p.to, p.shares[pl.entry]);
      for (int c = 0; c < mc.copies; ++c) {
        auto pipe = build_pipeline(m, space.layers(), alloc, n);
        HSPMD_CHECK(pipe.has_value()) << "mixed-length planner: ranks of kind " << m.kind
                                      << " ran out while placing groups of " << m.tp * m.cp << " devices";
        pipes[pl.interval][pl.entry].push_back(*pipe);
      }
    }
    // ZeRO-1 when a chosen method's memory counts on it (its shards only shrink with more pipelines).
    bool zero1 = false;
    for (const Picked& p : picked) {
      for (const MethodCopies& mc : p.pipelines) zero1 = zero1 || methods[mc.method].zero1_copies > 1;
    }
    sharding::Strategy st{name, zero1 ? 1 : 0, false, {}};
    for (size_t i = 0; i < picked.size(); ++i) {
      for (auto& entry : pipes[i]) {
        for (auto& pipe : entry) st.pipelines.push_back(std::move(pipe));
      }
      if (detail) {
        MixedLengthInterval iv;
        iv.low = int64_t{1} << picked[i].from;
        iv.high = std::min<int64_t>(int64_t{1} << picked[i].to, options.seq_len + 1);
        iv.pipelines = picked[i].pipelines;
        for (const MethodCopies& mc : iv.pipelines) iv.methods.push_back(methods[mc.method].to_string());
        iv.shares = picked[i].shares;
        iv.seconds = picked[i].seconds;
        detail->intervals.push_back(std::move(iv));
      }
    }
    st.validate(space.layers());
    if (detail) detail->predicted_seconds = seconds;
    return st;
  };

  MixedLengthPlan plan;
  const int buckets = space.buckets();
  plan.heterogeneous = solve(buckets, options.name, &plan);
  // Strategies for the three longest buckets' maximum lengths (batches rarely hold only the
  // shortest sequences, so lower buckets would seldom be chosen).
  const int64_t longest = lengths.back().first;
  for (int upto = std::max(1, buckets - 2); upto <= buckets; ++upto) {
    if (space.load(0, upto).tokens <= 0) continue;
    const int64_t max_len = upto == buckets ? std::max(options.seq_len, longest) : space.load(0, upto).longest;
    if (!plan.per_max_length.empty() && plan.per_max_length.back().max_len >= max_len) continue;
    plan.per_max_length.push_back({max_len, solve(upto, options.name + "-max" + std::to_string(max_len), nullptr)});
  }
  return plan;
}

}  // namespace hspmd::planner
