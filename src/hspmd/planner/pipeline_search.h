// Level 1 of the planner (planner/planner.h, the paper's Appendix A.1): the pipeline
// configurations, a search with pruning. A candidate fixes
//   - per device kind: how its devices are cut into TP groups (powers of two dividing the heads,
//     KV heads, hidden size, FFN size and vocabulary, profiled for the kind), or the kind left idle:
//     one degree t, or two degrees (the first k groups of t_big node by node, the rest of t_small;
//     every pair and k up to 8 devices, above t_big = 2 t_small on whole nodes and at most one
//     kind mixing). TP groups are consecutive devices of one node (TP never crosses a node);
//     devices of a node that do not make up a whole group stay idle. The groups of one kind and
//     one degree form a class;
//   - the number of pipelines D; each class's groups are spread over the pipelines as evenly as
//     possible (pipelines may differ by one group of a class: heterogeneous pipelines): every such
//     spread on clusters of up to 8 devices, one rotation (extras of different kinds on different
//     pipelines) or at most 16 spreads above;
//   - the order of the classes along every pipeline (e.g. H20 TP 2 stages first, then H800 TP 4);
//     above 8 devices the classes of one kind stay together;
//   - a micro-batch size b_p per pipeline (powers of two dividing the global batch): every
//     assignment on clusters of up to 8 devices; above, pipelines of the same kinds and TP degrees
//     share one size (they are interchangeable, and the sizes stay few).
//   Above 64 devices, a kind with more than 16 nodes mixes degrees only on every k-th node count
//   (k = nodes / 16, rounded up): the mixes stay about 16 per pair of degrees.
// Candidates come by ascending lower bound on their step time (the larger of: all layer work spread
// over every group's speed, with the bubbles; and the least time at which the pipelines take the
// batch in integer micro-batch counts, each pipeline no faster than its stages' least layer times
// over integer splits allow), so that the caller can stop once the bound reaches the best plan it
// found. They are generated lazily, best first: a *shape* (a cut per kind and a pipeline
// count D) has a bound below every candidate it expands to (the fastest micro-batch size for every
// group, the smallest size's bubbles), and a memory check (the pipeline with the fewest groups
// must hold every layer, each stage at most the layers its devices hold with one micro-batch in
// flight) drops shapes no candidate of which fits. Both bounds fall as D grows, so each cut's
// shapes are visited from its largest feasible D down, and a shape is expanded only when its
// bound is the lowest left; at the front it first takes an integer bound from its spreads
// (shape_integer_bound) and waits again where that is higher. The integer bounds of shapes,
// candidates and level 2 take each pipeline's floor (planner/pipeline_floor.h: its stages' sum,
// bottleneck and tail over one split, at their least). A cluster of thousands of devices thus costs its shapes' bounds
// (linear in the cuts and the D tried), not the product of every cut, D, spread, order and size.
// Level 2 (planner/layer_programs.h) turns a candidate into a strategy.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <tuple>
#include <unordered_map>
#include <set>
#include <string>
#include <vector>

#include "hspmd/planner/cost_model.h"
#include "hspmd/planner/pipeline_floor.h"
#include "hspmd/planner/planner.h"

namespace hspmd::planner {

// The fastest link a gradient ring may run at (a bound, not an estimate): over representatives,
// the first two devices of each (node, kind) of the ranks, as CostModel::collective_link reads a
// spec's tiers. A ring of more ranks than a node holds of one kind crosses nodes.
struct RingLinkBound {
  double fastest = std::numeric_limits<double>::infinity();
  double between_nodes = std::numeric_limits<double>::infinity();
  int widest_node = 1;  // the most ranks of one kind on one node
  double at_most(int64_t ring_ranks) const { return ring_ranks > widest_node ? between_nodes : fastest; }
};
RingLinkBound ring_link_bound(const CostModel& cost, const std::vector<int>& ranks);

// A TP group: consecutive devices of one kind on one node.
struct Group {
  std::string kind;
  int node = 0;
  std::vector<int> ranks;  // ascending, one node; CP outer, TP inner (sharding/strategy.h)
  int cp = 1;              // context-parallel degree: tp() x cp ranks
  int tp() const { return static_cast<int>(ranks.size()) / cp; }
};

// A level-1 candidate: pipelines as sequences of TP groups (stage j of pipeline p is
// pipelines[p][j]), a micro-batch size per pipeline.
struct Candidate {
  std::vector<int> micro_batch_sizes;  // per pipeline
  std::vector<std::vector<Group>> pipelines;
  double bound = 0;  // lower bound on the step time
};

class PipelineSearch {
 public:
  // `available`: the ranks the plan may use. Keeps references to the cost model and the options.
  PipelineSearch(const CostModel& cost, const PlannerOptions& options, const std::vector<int>& available);

  // The candidate with the lowest bound not yet returned, or none when every remaining candidate's
  // bound is at least `threshold` (or none remains). The first call builds the cuts, so keep_tp and
  // keep_micro_batch_sizes must be set before it.
  std::optional<Candidate> next(double threshold);

  int64_t generated() const { return generated_; }  // candidates generated so far
  int64_t shapes() const { return shapes_; }        // (cut, D) shapes expanded so far
  int64_t cuts() const { return static_cast<int64_t>(combos_.size()); }
  // The lowest bound among what remains (infinity when nothing does).
  double lowest_bound() const;
  // The lowest bound of a shape dropped because no candidate of it fits in memory (infinity: none):
  // below the best plan, a setting that needs less memory might find a faster plan.
  double lowest_memory_dropped_bound() const { return memory_dropped_bound_; }

  // Pruning for re-planning (and PlannerOptions::tp_per_kind): a kind listed here keeps these TP
  // degrees (one: that degree alone; several: mixes of them) or stays idle; non-empty
  // keep_micro_batch_sizes replaces the micro-batch sizes tried.
  std::map<std::string, std::set<int>> keep_tp;
  std::vector<int> keep_micro_batch_sizes;

 private:
  // One cut of the cluster: a mix (or idle) per kind; its groups by class ("H800/TP4").
  struct Combo {
    std::map<std::string, std::vector<Group>> groups;
    std::vector<std::string> used;  // the classes, sorted
    int total = 0;                  // groups
    bool mixed = false;             // a kind mixes TP degrees
    double rate_max = 0;            // sum over groups of max_b b / layer seconds(g, b)
    std::vector<double> capacity;   // per class (`used` order): its smallest device memory (inf: unknown)
    std::vector<std::vector<double>> least_layer_time;  // per class, per size (sizes_ order): over its groups
    std::vector<std::vector<double>> head;              // per class, per size: the head's compute on its last stage
  };
  struct Entry {
    double bound = 0;
    int64_t seq = 0;
    int combo = 0, D = 0;
    // >= 0: a generated candidate (in pending_); -1: shape (combo, D); -2: its stream; -3: shape
    // (combo, D) with its integer bound.
    int64_t candidate = -1;
    bool operator>(const Entry& o) const { return bound != o.bound ? bound > o.bound : seq > o.seq; }
  };

  void build();
  double shape_bound(const Combo& c, int D) const;
  // At most every candidate's integer bound (least_step of its pipelines' floors): per spread, each
  // pipeline's floor without the head at its best micro-batch size; the least over the spreads.
  double shape_integer_bound(const Combo& c, int D);
  // A pipeline of `counts` stages per class at size index `size` among D pipelines, the head on a
  // stage of class `head_class` (-1: the head not counted), each stage at most its class's most
  // layers (most_layers), its least tail (tail_per_layer) included.
  const PipelineFloor& floor(const Combo& c, int D, const std::vector<int>& counts, size_t size, int head_class,
                             const std::vector<std::pair<int, int>>& most);
  bool shape_fits(const Combo& c, int D) const;
  double tail_bound(const Combo& c, int D) const;
  // The least tail (exposed gradient sync and optimizer) a layer on a stage of class k adds.
  double tail_per_layer(const Combo& c, size_t k, int D) const;
  // Per class: the most layers one of its stages holds in the middle of a pipeline and alone in one
  // (with the embedding and head), with one micro-batch of the smallest size in flight, D pipelines.
  std::vector<std::pair<int, int>> most_layers(const Combo& c, int D) const;
  int next_shape_D(const Combo& c, int below);  // the largest D < below worth a shape, or 0
  void push_shape(int combo, int below);
  void expand(int combo, int D, double threshold);
  std::vector<std::vector<Group>> pipelines_of(const Combo& c, const std::map<std::string, std::vector<int>>& count,
                                               const std::vector<std::string>& order) const;
  double layer_time(const Group& g, int b) const;  // layer_seconds, memoized per group and size

  std::vector<std::map<std::string, std::vector<int>>> spreads(
      const std::vector<std::string>& used, const std::map<std::string, std::vector<Group>>& groups, int D) const;
  std::vector<std::vector<int>> size_assignments(const std::vector<std::vector<Group>>& pipes,
                                                 const std::vector<int>& sizes, bool mixed_tp) const;
  std::vector<std::vector<Group>> mixes_of(const std::string& kind, int cp) const;
  bool tp_allowed(const std::string& kind, int t) const;
  std::vector<Group> groups_of(const std::string& kind, int t, int cp) const;

  const CostModel& cost;
  const PlannerOptions& options;
  const ModelShape& shape;
  int layers = 0;
  int num_devices = 0;
  std::map<std::string, std::map<int, std::vector<int>>> devices;  // kind -> node -> ranks
  std::vector<int> sizes_;                                         // micro-batch sizes tried
  bool built_ = false;
  RingLinkBound ring_bound_;  // for tail_bound
  std::vector<Combo> combos_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue_;
  // A generated candidate waiting in the queue: its spread (the index into spreads()), its
  // micro-batch sizes (the index into size_assignments()) and its classes' order.
  struct Pending {
    int spread = 0, sizes = 0;
    std::vector<std::string> order;
  };
  std::map<int64_t, Pending> pending_;
  int64_t seq_ = 0, generated_ = 0, shapes_ = 0;
  double memory_dropped_bound_ = std::numeric_limits<double>::infinity();
  mutable std::unordered_map<int64_t, double> layer_memo_;  // (first rank, ranks, cp, size) packed
  // Floors of the pipelines of the shape being bounded or expanded (floor()), keyed on the size
  // index, the class holding the head (-1: none counted) and the stage counts per class.
  std::map<std::vector<int>, PipelineFloor> floors_;
};

// Seconds of one decoder layer of one micro-batch of b sequences on group g, its TP collectives
// included (both levels price a layer this way). `sequence_parallel`: the faster of the layer with
// and without SP on its TP degree (SP moves the same ring bytes and splits duplicated work, but pads
// each sequence to the t x c ranks, which can add tokens), so that bounds stay below either.
double layer_seconds(const CostModel& cost, const Group& g, int b, bool sequence_parallel = false);

// Powers of two up to `up_to` that divide n.
std::vector<int> powers_of_two_dividing(int64_t n, int64_t up_to);

}  // namespace hspmd::planner
