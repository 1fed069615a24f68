#include "hspmd/specialize/rank_memory.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>

#include "hspmd/specialize/exec_graph.h"

namespace hspmd::specialize {

using sharding::Annotation;
using sharding::DistState;

namespace {

struct AnnotationPtrHash {
  size_t operator()(const Annotation* a) const { return a->hash(); }
};
struct SameAnnotation {
  bool operator()(const Annotation* a, const Annotation* b) const { return *a == *b; }
};

// Every annotation the estimate reads, once each: the tensors' and the optimizer states'.
std::vector<const Annotation*> distinct_annotations(const graph::DeducedAnnotations& deduced,
                                                    const sharding::AnnotationPlan& plan) {
  std::unordered_set<const Annotation*, AnnotationPtrHash, SameAnnotation> seen;
  std::vector<const Annotation*> out;
  auto add = [&](const Annotation& a) {
    if (seen.insert(&a).second) out.push_back(&a);
  };
  for (const auto& outputs : deduced.by_op()) {
    for (const Annotation& a : outputs) add(a);
  }
  for (const auto& [name, a] : plan.tensors()) add(a);
  for (const auto& [name, a] : plan.optimizer_states()) add(a);
  return out;
}

// What a rank holds of each annotation, one entry per annotation: 0 for nothing, else 1 + the index
// in its subgroup and which of the annotation's distinct DistStates shards that subgroup. Equal rows
// mean equal local shapes everywhere (rank_memory.h).
class Positions {
 public:
  Positions(const std::vector<const Annotation*>& annotations, const std::vector<int>& ranks)
      : width_(annotations.size()) {
    int most = -1;
    for (int r : ranks) most = std::max(most, r);
    slot_.assign(static_cast<size_t>(most + 1), -1);
    int slots = 0;
    for (int r : ranks) {
      if (slot_[r] < 0) slot_[r] = slots++;
    }
    rows_.assign(static_cast<size_t>(slots) * width_, 0);
    for (size_t u = 0; u < annotations.size(); ++u) {
      const Annotation& a = *annotations[u];
      std::vector<const DistState*> states;
      for (int g = 0; g < a.hsize(); ++g) {
        const DistState& ds = a.ds(g);
        // Most annotations shard every subgroup alike: the last state found usually matches.
        auto same = std::find_if(states.rbegin(), states.rend(), [&](const DistState* s) { return *s == ds; });
        const int64_t state = same == states.rend() ? static_cast<int64_t>(states.size())
                                                    : static_cast<int64_t>(states.rend() - same - 1);
        if (same == states.rend()) states.push_back(&ds);
        const std::vector<int>& devices = a.group(g).devices();
        for (size_t i = 0; i < devices.size(); ++i) {
          const int d = devices[i];
          if (d > most || slot_[d] < 0) continue;
          rows_[static_cast<size_t>(slot_[d]) * width_ + u] = (state << 32 | static_cast<int64_t>(i)) + 1;
        }
      }
    }
  }

  bool same(int rank_a, int rank_b) const { return std::equal(row(rank_a), row(rank_a) + width_, row(rank_b)); }
  size_t hash(int rank) const {
    size_t h = 0x9e3779b97f4a7c15ull;
    for (const int64_t* p = row(rank); p != row(rank) + width_; ++p) {
      h = (h ^ static_cast<size_t>(*p)) * 0x100000001b3ull;
    }
    return h;
  }

 private:
  const int64_t* row(int rank) const { return rows_.data() + static_cast<size_t>(slot_[rank]) * width_; }

  size_t width_;
  std::vector<int> slot_;      // rank -> its row
  std::vector<int64_t> rows_;  // [row][annotation]
};

bool same_options(const MemoryEstimateOptions& a, const MemoryEstimateOptions& b) {
  return a.micro_batch_tokens == b.micro_batch_tokens && a.micro_batches_in_flight == b.micro_batches_in_flight &&
         a.gradients_reduced_on_a_thread == b.gradients_reduced_on_a_thread;
}

}  // namespace

std::vector<int> memory_classes(const graph::Graph& g, const sharding::AnnotationPlan& plan,
                                const graph::DeducedAnnotations& deduced, const std::vector<RankMemoryQuery>& queries) {
  std::vector<int> ranks;
  for (const RankMemoryQuery& q : queries) ranks.push_back(q.rank);
  const Positions positions(distinct_annotations(deduced, plan), ranks);
  std::vector<const Annotation*> placeholders;
  for (int id = 0; id < g.num_ops(); ++id) {
    if (g.op(id).kind == graph::OpKind::kPlaceholder) placeholders.push_back(&deduced.at(graph::TensorRef{id, 0}));
  }
  // The estimate reads the micro-batches of the data group's pipeline (ZeRO-2); a group outside the
  // pipelines reads as one key of its own so the representative fails as that rank would.
  auto data_micro_batches = [&](int rank) {
    const int group = data_group(placeholders, rank);
    if (group < 0) return -1;
    return group < static_cast<int>(plan.pipelines.size()) ? plan.pipelines[group].num_micro_batches : -2 - group;
  };
  std::vector<int> micro_batches;
  for (const RankMemoryQuery& q : queries) micro_batches.push_back(data_micro_batches(q.rank));

  std::vector<int> out(queries.size());
  std::vector<size_t> first_of_class;
  std::unordered_map<size_t, std::vector<int>> classes_by_hash;
  for (size_t k = 0; k < queries.size(); ++k) {
    const MemoryEstimateOptions& o = queries[k].options;
    size_t h = positions.hash(queries[k].rank);
    for (int64_t v : {o.micro_batch_tokens, static_cast<int64_t>(o.micro_batches_in_flight),
                      static_cast<int64_t>(micro_batches[k])}) {
      h = (h ^ static_cast<size_t>(v)) * 0x100000001b3ull;
    }
    std::vector<int>& candidates = classes_by_hash[h];
    auto match = std::find_if(candidates.begin(), candidates.end(), [&](int c) {
      const size_t first = first_of_class[c];
      return same_options(queries[first].options, o) && micro_batches[first] == micro_batches[k] &&
             positions.same(queries[first].rank, queries[k].rank);
    });
    if (match != candidates.end()) {
      out[k] = *match;
      continue;
    }
    out[k] = static_cast<int>(first_of_class.size());
    candidates.push_back(out[k]);
    first_of_class.push_back(k);
  }
  return out;
}

std::vector<MemoryEstimate> estimate_memory_of_ranks(const graph::Graph& g,
                                                     std::shared_ptr<const sharding::AnnotationPlan> plan,
                                                     std::shared_ptr<const graph::DeducedAnnotations> deduced,
                                                     const std::vector<RankMemoryQuery>& queries) {
  const std::vector<int> classes = memory_classes(g, *plan, *deduced, queries);
  std::vector<MemoryEstimate> of_class;
  std::vector<MemoryEstimate> out;
  out.reserve(queries.size());
  for (size_t k = 0; k < queries.size(); ++k) {
    if (classes[k] == static_cast<int>(of_class.size())) {
      const ExecGraph exec(g, plan, deduced, queries[k].rank);
      of_class.push_back(estimate_memory(exec, queries[k].options));
    }
    out.push_back(of_class.at(classes[k]));
  }
  return out;
}

}  // namespace hspmd::specialize
