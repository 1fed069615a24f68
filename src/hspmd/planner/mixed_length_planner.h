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
// *parallel method* is a pipeline template on one device kind: TP degree t (profiled) x CP degree c
// (t x c consecutive devices of one node) x PP degree s (layers split evenly), a micro-batch size
// b (micro-batches packed up to b x seq_len tokens, or what the memory holds), whether its TP
// stages run sequence parallelism (activations between the TP blocks split by tokens: less memory,
// the TP-duplicated work on 1/t of the tokens) and whether its optimizer states are sharded (ZeRO-1)
// over at least k of its own copies (k = 2, 4, ...: more memory for activations, so longer
// sequences; the method then runs with k copies or more, and the strategy is ZeRO-1 when any chosen
// method is); its time for packed micro-batches is the dispatcher's model (planner/dispatcher.h, the
// cost model's stage times, sync and overlap) and its memory bounds the longest sequence it holds.
// An SP method is kept like another: where it holds an interval's longest sequence when the method
// without SP does not, or is faster (a tie keeps the method without). ZeRO-2 and ZeRO-3 are not
// methods: the strategies are run with dispatch by length, which gives each pipeline its own count
// of micro-batches per batch, and ZeRO-2 drops the gradient accumulator only on the pipelines
// running the fewest of them (so it holds no longer sequence for sure) while ZeRO-3 needs every
// pipeline to run as many (runtime/step_runner.cc refuses the step otherwise). The expected work of a step in an interval of buckets is the
// histogram's sequences there, scaled to the global batch's tokens.
//
// Objective (MixedLengthSpace::interval_seconds): an interval's pipelines (up to
// methods_per_interval distinct methods, any copies of each) share its work so that they finish
// together; a pipeline taking a share x of it runs x tokens / (micro-batch tokens) micro-batches
// (at least one) of equal load, so its time is the cost model's sum_j f_j + (n - 1) max_j f_j plus
// its gradient sync and optimizer: piecewise linear in x, which gives the balanced time exactly.
// The step is the slowest interval. A dynamic program over the buckets in length order and the
// devices used per kind chooses consecutive intervals and each interval's pipelines, every one of
// them holding the interval's longest sequence; per interval, a method that is slower at every
// share than another of its kind on no more devices is dropped first (it can never be needed).
// It is exact over that space: tests/planner/mixed_length_planner_test.cc checks it against
// exhaustive enumeration. A strategy for maximum length b is the same program over the buckets
// up to b.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hspmd/models/model.h"
#include "hspmd/planner/dispatcher.h"
#include "hspmd/planner/length_strategies.h"
#include "hspmd/planner/profile.h"
#include "hspmd/resolve/topology.h"

namespace hspmd::planner {

struct MixedLengthOptions {
  int64_t seq_len = 4096;               // the context length: segments are at most this long
  int64_t global_batch_tokens = 65536;  // tokens per step
  std::string name = "mixed";           // strategies are named <name>, <name>-max<b>
  int methods_per_interval = 2;         // distinct parallel methods one interval may combine
  std::vector<int> micro_batch_sizes = {1, 2, 4};  // rows of seq_len tokens a micro-batch packs
  std::vector<int> cp_degrees = {1, 2, 4, 8};      // CP x TP groups stay inside a node
  std::vector<int> pipeline_degrees = {1, 2, 4, 8};
  // The runtime's gradient buckets (--grad-bucket-mb): the gradient sync the cost model hides behind
  // backward passes (CostOptions::grad_bucket_mb); 0: none.
  double grad_bucket_mb = 25;
  bool sequence_parallel = true;  // whether methods with sequence-parallel TP stages are considered
};

// A pipeline template on one device kind.
struct ParallelMethod {
  std::string kind;
  int kind_index = 0;  // into MixedLengthSpace::kinds()
  int tp = 1, cp = 1, pp = 1;
  int micro_batch_size = 1;
  // "sequence_parallel" on every stage (TP > 1, micro-batch rows splitting over t x c ranks).
  bool sequence_parallel = false;
  // ZeRO-1 over at least this many replicas (1: none). The memory is priced with the optimizer
  // states sharded over `zero1_copies` pipelines of this method, so the method may be used only
  // with that many copies (a strategy's ZeRO-1 shards over every pipeline: never fewer).
  int zero1_copies = 1;
  PipelineModel model;  // micro_batch_tokens = min(memory limit, micro_batch_size x seq_len)
  int devices() const { return tp * cp * pp; }
  std::string to_string() const;  // "slow TP 2 x CP 1 x PP 2, micro-batches of 2 x 256 tokens"
};

// The expected sequences of one step in a range of buckets.
struct LengthLoad {
  double tokens = 0, squares = 0;  // sum of lengths, of squared lengths
  int64_t longest = 0;
};

// Pipelines of one method in an interval: how many, and the share of the interval's work each takes.
struct MethodCopies {
  int method = 0;
  int copies = 1;
};

// The planner's search space and objective, apart from the search so that a test can enumerate it.
class MixedLengthSpace {
 public:
  // `lengths`: (segment length, count) pairs, ascending (data::LengthHistogram::segment_lengths).
  MixedLengthSpace(const models::Model& model, const resolve::Topology& topology, const Profile& profile,
                   const std::vector<std::pair<int64_t, uint64_t>>& lengths, const MixedLengthOptions& options);

  const std::vector<ParallelMethod>& methods() const { return methods_; }
  const std::vector<std::string>& kinds() const { return kinds_; }
  int kind_devices(int kind) const { return kind_devices_[kind]; }
  int buckets() const { return buckets_; }                        // bucket k holds lengths [2^k, 2^(k+1))
  const LengthLoad& load(int from, int to) const { return loads_[from][to]; }  // buckets [from, to)
  // Whether `method` holds the longest sequence of buckets [from, to).
  bool holds(int method, int from, int to) const;
  // The fewest copies `method` may run with (its zero1_copies).
  int min_copies(int method) const { return methods_[method].zero1_copies; }
  // Seconds of the step's share of buckets [from, to) run by these pipelines, its work balanced so
  // that they finish together (0 for an interval without sequences). `shares`, when given, receives
  // per entry the share of the interval's work one copy takes. Every method must hold the interval.
  double interval_seconds(int from, int to, const std::vector<MethodCopies>& pipelines,
                          std::vector<double>* shares = nullptr) const;
  // Micro-batches one copy runs for `share` of buckets [from, to).
  int micro_batches(int method, int from, int to, double share) const;

  const MixedLengthOptions& options() const { return options_; }
  const resolve::Topology& topology() const { return topology_; }
  int layers() const { return layers_; }

 private:
  const resolve::Topology& topology_;
  MixedLengthOptions options_;
  int layers_ = 0;
  std::vector<std::string> kinds_;
  std::vector<int> kind_devices_;
  std::vector<ParallelMethod> methods_;
  int buckets_ = 0;
  std::vector<std::vector<LengthLoad>> loads_;
};

struct MixedLengthInterval {
  int64_t low = 0, high = 0;  // lengths in [low, high)
  std::vector<MethodCopies> pipelines;
  std::vector<std::string> methods;  // ParallelMethod::to_string of each entry of `pipelines`
  std::vector<double> shares;        // per entry: the share of the interval's work one copy takes
  double seconds = 0;                // predicted time of its share of a step
};

struct MixedLengthPlan {
  sharding::Strategy heterogeneous;
  std::vector<MixedLengthInterval> intervals;  // of the heterogeneous strategy, in length order
  double predicted_seconds = 0;                // the slowest interval
  std::vector<LengthStrategy> per_max_length;  // increasing max_len; the last covers seq_len
  std::string to_string() const;
};

// Error when no method on the cluster holds the longest segment, naming its length.
MixedLengthPlan plan_mixed_length(const models::Model& model, const resolve::Topology& topology,
                                  const Profile& profile, const std::vector<std::pair<int64_t, uint64_t>>& lengths,
                                  const MixedLengthOptions& options);

}  // namespace hspmd::planner
