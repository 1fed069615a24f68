// The mixed-length planner (paper Appendix A.1(c)): from a dataset's segment length distribution,
// a heterogeneous strategy whose pipelines are tailored to length intervals, plus one strategy per
// maximum-length bucket (for `hspmd train --strategy-for-max-len`, docs/dispatch.md).
//
//   MixedLengthPlan p = plan_mixed_length(model, cluster, profile, histogram.segment_lengths,
//                                         {.seq_len = 4096, .global_batch_tokens = 65536});
//   p.heterogeneous               // every interval's pipelines together
//   p.per_max_length[i]           // {max_len, strategy planned for batches up to max_len}
//
// Method. Lengths are grouped into doubling buckets ([1, 2), [2, 4), ..., up to seq_len). A
// *parallel method* is a pipeline template on one device kind: TP degree t (profiled, dividing the
// kind's devices per node) x PP degree s (1, 2, 4, 8 stages, layers split evenly), one micro-batch
// of up to seq_len tokens; its time for a sequence of length l is the dispatcher's model
// (planner/dispatcher.h, from the cost model) and its memory bounds the longest sequence it holds.
// The expected work of a step in an interval of buckets is the histogram's sequences there, scaled
// to the global batch's tokens. A dynamic program over the buckets, in length order, and the
// devices used per kind chooses consecutive intervals, each with one method and a number of copies
// of it, minimizing the slowest interval's predicted time (work / copies, plus a micro-batch's
// fill and drain and the sync); each interval's method must hold its longest sequence. A strategy
// for maximum length b is the same program over the buckets up to b.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hspmd/models/model.h"
#include "hspmd/planner/length_strategies.h"
#include "hspmd/planner/profile.h"
#include "hspmd/resolve/topology.h"

namespace hspmd::planner {

struct MixedLengthOptions {
  int64_t seq_len = 4096;              // the context length: segments are at most this long
  int64_t global_batch_tokens = 65536;  // tokens per step
  std::string name = "mixed";          // strategies are named <name>, <name>-max<b>
};

struct MixedLengthInterval {
  int64_t low = 0, high = 0;  // lengths in [low, high)
  std::string kind;           // the method: device kind, TP x PP, copies
  int tp = 1, pp = 1, copies = 0;
  double seconds = 0;         // predicted time of its share of a step
};

struct MixedLengthPlan {
  sharding::Strategy heterogeneous;
  std::vector<MixedLengthInterval> intervals;  // of the heterogeneous strategy, in length order
  double predicted_seconds = 0;                // the slowest interval
  std::vector<LengthStrategy> per_max_length;  // increasing max_len; the last covers seq_len
  std::string to_string() const;
};

// `lengths`: (segment length, count) pairs (data::LengthHistogram::segment_lengths). Error when no
// method on the cluster holds the longest segment, naming its length.
MixedLengthPlan plan_mixed_length(const models::Model& model, const resolve::Topology& topology,
                                  const Profile& profile, const std::vector<std::pair<int64_t, uint64_t>>& lengths,
                                  const MixedLengthOptions& options);

}  // namespace hspmd::planner
