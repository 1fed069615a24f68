// Level 2 of the planner (planner/planner.h, the paper's Appendix A.1): for one pipeline
// configuration (planner/pipeline_search.h), the layers per stage and the micro-batches per
// pipeline, as integer programs solved by COIN-OR CBC (planner/milp.h):
//   (a) layers per stage, per pipeline and micro-batch count n: integer x_j >= 1, sum x_j = layers,
//       each stage's predicted memory <= its device memory, minimizing
//       sum_j f_j + (n - 1) max_j f_j + max_j (gradient sync_j + optimizer_j)   (f_j affine in x_j).
//       For every n at or above the stage count (where 1F1B's memory no longer depends on n) the
//       best split is a line in n; the lower envelope of those lines is found exactly with a few
//       solves at their crossing points (each solve at a real-valued n).
//   (b) micro-batches per pipeline: pipelines of equal stage lines and micro-batch size form a type
//       (interchangeable: hundreds of pipelines at 1,024 GPUs are a handful of types); per type k
//       and count n, integer z_{k,n} = how many of its pipelines run n micro-batches (a binary when
//       the type is one pipeline), sum n b_k z_{k,n} = global batch, minimizing the slowest pipeline.
//       Each type's window of n is narrowed first, exactly: pipeline times grow with n, so the
//       optimum's threshold T* (the least time at which the pipelines can take every micro-batch)
//       bounds every count. Tables, relaxations and windows are likewise found once per type.
//       Under ZeRO-3 every pipeline runs B / sum_p b_p (the runtime's condition), no program.
// The costs are the cost model's building blocks (planner/cost_model.h), so a solution is priced
// the same way CostModel::predict prices it.
#pragma once

#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hspmd/planner/cost_model.h"
#include "hspmd/planner/pipeline_search.h"
#include "hspmd/planner/planner.h"
#include "hspmd/sharding/strategy.h"

namespace hspmd::planner {

// What level 2 finds that does not depend on the memory setting (ZeRO stage): the groups' costs,
// the gradient rings' links and the layer splits' integer programs (keyed on the memory limits they
// were solved under). The planner hands it from its ZeRO-1 search to the ZeRO-2 and ZeRO-3 searches
// below the best plan, which then solve only the programs memory changes.
struct LayerProgramsShared;

class LayerPrograms {
 public:
  // Keeps references to the cost model and the options. Tables of equal pipelines are shared
  // between the candidates of one planning run; `shared` (none: a new one) between runs.
  LayerPrograms(const CostModel& cost, const PlannerOptions& options,
                std::shared_ptr<LayerProgramsShared> shared = nullptr);
  const std::shared_ptr<LayerProgramsShared>& shared() const { return shared_; }

  // The candidate's strategy (layers per stage, micro-batches per pipeline), or none when nothing
  // fits in memory or when a relaxation shows its step would be at least `prune_at` (before any
  // integer program: the planner passes the best step found so far).
  std::optional<sharding::Strategy> solve(const Candidate& c,
                                          double prune_at = std::numeric_limits<double>::infinity());

  // The least step CostModel::predict can give the strategy solve() last returned, with sequence
  // parallelism on its TP stages or off: each pipeline's time from the stage lines (the cost
  // model's terms, SP's never slower, ZeRO-3's gathers on the fastest ring where the pipelines
  // may split differently), each stage's tail at least its optimizer step and the part of its
  // gradient sync no overlap hides, on the fastest link its ring may run at (ring_bound).
  // The planner skips predicting a solution whose floor is above the best plan.
  double solution_floor() const { return solution_floor_; }
  // The fastest links a gradient ring may run at (solution_floor's sync); unset: no sync counted.
  RingLinkBound ring_bound;

  int milps() const { return milps_; }  // integer programs solved so far
  int relaxation_pruned() const { return relaxation_pruned_; }  // candidates solve() dropped unsolved
  // The lowest bound of a candidate solve() found nothing for because of memory (infinity: none).
  double lowest_memory_dropped_bound() const { return memory_dropped_bound_; }

 private:
  // What a stage costs as a function of its layer count x (all affine in x).
  struct StageLine {
    std::string kind;
    int tp = 1, cp = 1;
    bool first = false, last = false;
    double per_layer = 0, fixed = 0;       // f(x) = per_layer x + fixed, per micro-batch
    // The least f(x) predict() can give where the pipelines are of several types (solution_floor's):
    // f with ZeRO-3's gathers on the fastest ring a layer may have (stage_lines); without ZeRO-3, f.
    double floor_per_layer = 0, floor_fixed = 0;
    double tail_per_layer = 0, tail_fixed = 0;  // gradient sync + optimizer, per step
    // What of the tail no overlap can hide (the relaxation's lower bound): with gradient buckets,
    // ZeRO-1/2's parameter all-gather and the optimizer; without, the whole tail.
    double tail_floor_per_layer = 0, tail_floor_fixed = 0;
    double capacity = 0;
    auto operator<=>(const StageLine&) const = default;
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

  // Pipelines of a candidate with equal stage lines and micro-batch size are interchangeable: each
  // such type is priced, tabled and counted once, however many pipelines it has (hundreds of equal
  // pipelines at 1,024 GPUs), so level 2 grows with the types, not with the pipelines.
  struct PipelineType {
    std::vector<StageLine> lines;
    int b = 1, max_n = 1;
    std::vector<int> members;  // its pipelines, ascending
    std::vector<double> g;     // g[n]: its time for n micro-batches (kInf: does not fit), 1 <= n <= max_n
  };

  // What table() is keyed on: the pipeline's stage lines, its micro-batch size, count limit and D.
  struct TableKey {
    int max_n = 0, b = 0, D = 0;
    std::vector<StageLine> lines;
    auto operator<=>(const TableKey&) const = default;
  };

  // A lower bound on the step of any solution of a candidate whose pipelines are these types: each
  // pipeline's passes at their least over integer splits of its stage lines (PipelineFloor), its
  // slowest sync at its own least, and the least time at which the pipelines take the batch in
  // whole micro-batches (least_step). Memory is ignored (it only removes solutions).
  double relaxed_bound(const std::vector<PipelineType>& types) const;
  // `rings[j]`: the slowest link of the gradient ring of stage index j (the same for every pipeline).
  std::vector<StageLine> stage_lines(const Candidate& c, size_t p, const std::vector<std::pair<double, double>>& rings);
  std::pair<double, double> ring_link(const std::vector<int>& ring);  // collective_link, memoized
  double memory(const StageLine& s, int x, int b, int in_flight, int D) const;
  // What a stage of x layers spends after its pipeline's passes at least (solution_floor).
  double tail_floor(const StageLine& s, int x, int D) const;
  std::optional<SplitLine> best_split(const std::vector<StageLine>& st, double m, const std::vector<int>& in_flight,
                                      int b, int D);
  PipelineTable table(const std::vector<StageLine>& st, int max_n, int b, int D);
  // Micro-batch counts per type: for each type, how many of its pipelines run n micro-batches.
  std::optional<std::vector<std::map<int, int>>> program(const std::vector<PipelineType>& types,
                                                         const std::vector<int>& hi, int64_t hi_sum);

  const CostModel& cost;
  const PlannerOptions& options;
  const ModelShape& shape;
  int layers = 0;
  int milps_ = 0;
  int relaxation_pruned_ = 0;
  std::map<TableKey, PipelineTable> tables;
  // What a stage's layers, ends and memory are (StageLine's, the p2p to the next stage aside), per
  // group: keyed on its first rank, size, CP degree, micro-batch size and ends, the ranks kept to
  // tell apart groups of equal key (the search's groups are consecutive ranks; others are priced
  // uncached).
  struct GroupCosts {
    std::vector<int> ranks;
    double per_layer = 0, ends = 0, capacity = 0;
  };
  const GroupCosts& group_costs(const Group& g, int b, bool first, bool last);
  GroupCosts uncached_;  // the last group priced without the memo (a key another group holds)
  double memory_dropped_bound_ = std::numeric_limits<double>::infinity();
  double solution_floor_ = 0;

  // What best_split's integer program depends on: the stage lines, m and each stage's most layers
  // (memory's only part in it, capped at what the other stages' one layer each leaves).
  struct SplitKey {
    std::vector<StageLine> lines;
    double m = 0;
    std::vector<int> most;
    auto operator<=>(const SplitKey&) const = default;
  };

  friend struct LayerProgramsShared;
  std::shared_ptr<LayerProgramsShared> shared_;
};

struct LayerProgramsShared {
  std::map<std::vector<int>, std::pair<double, double>> ring_links;  // each gradient ring's slowest link
  std::unordered_map<int64_t, LayerPrograms::GroupCosts> group_costs;
  std::map<LayerPrograms::SplitKey, std::optional<LayerPrograms::SplitLine>> splits;  // best_split's programs
};

}  // namespace hspmd::planner
