// Dispatch by length (paper §7 scenario (c), A.1(c)): each step, the sequences of the global batch
// are assigned to the pipelines of a heterogeneous strategy so that the slowest pipeline finishes as
// early as possible, then each pipeline's sequences are packed into its micro-batches.
//
//   std::vector<PipelineModel> pipes = pipeline_models(cost_model, strategy, {.seq_len = 4096});
//   Dispatch d = dispatch(lengths, pipes);   // throws SequenceTooLong for a sequence no pipeline holds
//   d.micro_batches[p][m]                    // indices into `lengths` of micro-batch m of pipeline p
//   d.step_seconds                           // the predicted step: the slowest pipeline
//
// Why a per-pipeline model and not the cost model itself: the cost model prices micro-batches of b
// sequences of one length; a packed micro-batch holds sequences of different lengths, whose
// attention costs the sum of their squares. Every stage time of the cost model is exactly
// A s^2 + B s + C in the sequence length s (layers: b (a s^2 + c1 s) + c0, sequence parallelism
// taking the TP-duplicated part of c1 on 1/t of the tokens; ends, TP and CP collectives and p2p:
// linear; ZeRO-3's parameter gathers and gradient reduce-scatters: constant per micro-batch), so
// three evaluations of the cost model's stage times (CostModel::predict of micro-batches of one
// sequence) give A, B, C, and a packed micro-batch costs A sum(l_i^2) + B sum(l_i) + C on that
// stage. The pipeline time of micro-batches m = 1..n is
//   sum_m max_j f_j(m) + (sum_j f_j(m*) - max_j f_j(m*))      (steady state at the bottleneck stage,
//                                                              plus the fill and drain of the largest)
// which is the cost model's sum_j f_j + (n - 1) max_j f_j when the micro-batches are equal; the
// pipeline's gradient sync and optimizer (`tail_seconds`: the cost model's, at the strategy's
// micro-batches, so ZeRO-1/2's reduce-scatters and the part of the sync the gradient buckets hide
// behind backward passes, CostOptions::grad_bucket_mb) are added once.
//
// Memory: the longest sequence a pipeline holds is the largest micro-batch (in tokens) for which the
// cost model's memory of every stage fits its devices, with the micro-batches in flight of its
// schedule, sequence parallelism on the stages that have it and ZeRO-3's sharded weights. Not
// ZeRO-2's missing gradient accumulator: that holds only on a pipeline running the fewest
// micro-batches of a step, which each batch's dispatch decides. A sequence longer than that goes to another pipeline; one longer than every pipeline's
// limit is refused (SequenceTooLong names its length and the limit).
//
// Assignment: longest sequence first, each to the pipeline whose predicted time after taking it is
// lowest (among those that can hold it); then, while it shortens the step, a sequence moves off the
// slowest pipeline or is swapped for a shorter one of another (swaps on batches of up to ~64). Each pipeline's sequences are packed first-fit decreasing into micro-batches of
// at most `micro_batch_tokens` tokens. Deterministic: ties go to the lower pipeline, so every rank
// computes the same dispatch without talking.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hspmd/core/error.h"
#include "hspmd/planner/cost_model.h"
#include "hspmd/sharding/strategy.h"

namespace hspmd::planner {

// Seconds of one micro-batch on one stage whose sequences have lengths l_i.
struct StageTimeModel {
  double quadratic = 0;  // per sum(l_i^2): attention
  double linear = 0;     // per token
  double constant = 0;   // per micro-batch
  double seconds(double sum_squares, double tokens) const { return quadratic * sum_squares + linear * tokens + constant; }
};

// What a packed micro-batch weighs in the time model.
struct MicroBatchLoad {
  double tokens = 0;
  double sum_squares = 0;  // sum over its sequences of length^2
};

struct PipelineModel {
  std::vector<StageTimeModel> stages;  // in pipeline order
  int64_t max_tokens = 0;              // longest sequence (and micro-batch) the memory holds
  int64_t micro_batch_tokens = 0;      // micro-batches are packed up to this (<= max_tokens)
  double tail_seconds = 0;             // gradient sync and optimizer, once per step

  // Predicted seconds of forward and backward of these micro-batches (without the tail).
  double seconds(std::span<const MicroBatchLoad> micro_batches) const;
};

struct PipelineModelOptions {
  int64_t seq_len = 4096;  // the run's context length: micro-batches pack micro_batch_size x seq_len tokens
  int64_t max_tokens_searched = int64_t{1} << 24;  // the memory limit is searched up to here
};

// One model per pipeline of `strategy`, from the cost model's stage times and memory (see above).
std::vector<PipelineModel> pipeline_models(const CostModel& cost_model, const sharding::Strategy& strategy,
                                           const PipelineModelOptions& options);

// A sequence longer than every pipeline of the strategy can hold.
class SequenceTooLong : public Error {
 public:
  using Error::Error;
};

struct Dispatch {
  std::vector<std::vector<std::vector<size_t>>> micro_batches;  // [pipeline][micro-batch] -> sequence index
  std::vector<double> pipeline_seconds;  // predicted, with the tail
  std::vector<int64_t> pipeline_tokens;
  double step_seconds = 0;  // the slowest pipeline
  // Share of the pipelines' time spent waiting for the slowest: sum_p (step - t_p) / (P x step).
  double idle_share() const;
  // "pipeline 0: 3 seqs in 2 micro-batches, 410 tokens, 0.110 s | pipeline 1: ..."
  std::string to_string() const;
};

// Throws SequenceTooLong naming the sequence's index and length and the longest a pipeline holds.
Dispatch dispatch(std::span<const int64_t> lengths, std::span<const PipelineModel> pipelines);
// What dispatch() would refuse the batch with, asked beforehand (a caller weighing several strategies
// skips one that cannot hold the batch): none when every sequence fits some pipeline.
std::optional<std::string> sequence_too_long(std::span<const int64_t> lengths,
                                             std::span<const PipelineModel> pipelines);

}  // namespace hspmd::planner
