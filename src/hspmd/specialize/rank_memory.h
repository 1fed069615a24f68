// The memory estimates (specialize/memory_estimate.h) of many ranks of one plan, each computed once
// per class of ranks that see the same graph: `hspmd explain` prints one for every rank, and an
// ExecGraph per rank made that quadratic in the ranks (each locates itself in every tensor's
// annotation), 246 s for 4,096 ranks.
//
//   std::vector<RankMemoryQuery> q = {{0, {.micro_batch_tokens = 4096, .micro_batches_in_flight = 4}}, ...};
//   std::vector<MemoryEstimate> m = estimate_memory_of_ranks(graph, plan, deduced, q);   // m[k] for q[k]
//
// Two ranks are in one class when their queries' options are equal, the pipelines of the data they
// are fed run as many micro-batches, and in every annotation of the graph (each tensor's, each
// optimizer state's) both hold nothing or both hold the part at the same index of equal DistStates.
// That is everything the estimate reads of a rank: which ops it runs follows from what it holds, the
// shape of what it holds from the DistState, the index and the tensor's bound shape (a top-tier
// split is even, so its subgroup changes where a part lies, not its size). So a data-parallel
// replica's stage, or another pipeline of the same shape, costs a lookup per annotation; a DP x TP x
// PP layout has stages x TP classes whatever its data-parallel degree.
#pragma once

#include <memory>
#include <vector>

#include "hspmd/graph/deduction.h"
#include "hspmd/graph/graph.h"
#include "hspmd/sharding/plan.h"
#include "hspmd/specialize/memory_estimate.h"

namespace hspmd::specialize {

struct RankMemoryQuery {
  int rank = 0;
  MemoryEstimateOptions options;
};

// The class of each query, numbered 0, 1, ... in order of first appearance; queries of one class
// have equal estimates by construction (see above).
std::vector<int> memory_classes(const graph::Graph& g, const sharding::AnnotationPlan& plan,
                                const graph::DeducedAnnotations& deduced, const std::vector<RankMemoryQuery>& queries);

// estimate_memory of an ExecGraph of each query's rank, one ExecGraph per class; in query order.
std::vector<MemoryEstimate> estimate_memory_of_ranks(const graph::Graph& g,
                                                     std::shared_ptr<const sharding::AnnotationPlan> plan,
                                                     std::shared_ptr<const graph::DeducedAnnotations> deduced,
                                                     const std::vector<RankMemoryQuery>& queries);

}  // namespace hspmd::specialize
