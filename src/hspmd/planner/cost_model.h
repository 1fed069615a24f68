// CostModel: predicts the step time and each rank's peak memory of a strategy (sharding/strategy.h)
// on a cluster (resolve/topology.h) from a profile (planner/profile.h), without running anything.
//
//   CostModel cm(config, topology, profile, {.seq_len = 4096});
//   Prediction p = cm.predict(Strategy::from_file("table9-32b-16h800-32h20.json"));
//   p.step_seconds;              // the slowest pipeline, its gradient sync and optimizer
//   p.ranks[r].memory.total();   // peak bytes of rank r
//   p.fits                       // every rank within its device's memory
//
// Per stage j of a pipeline running n micro-batches of b sequences of s tokens (kind = the stage's
// slowest device kind, t = its TP degree):
//   f_j = layers_j * layer(t, b, s)                       profiled fwd+bwd of one decoder layer
//       + [last stage] ends(t, b * s)                     embedding, head and loss
//       + [unless the profile measured them inside the layer] 4 all-reduces per layer of
//         b*s*hidden activations over the stage's TP group (ring, on the group's slowest link),
//         one more on the first stage (embedding) and on the last (head) with the loss's gather
//       + [not last] activation send + gradient receive to the next stage (p2p on that link)
//   pipeline time = sum_j f_j + (n - 1) * max_j f_j       (1F1B and GPipe have the same bubble,
//                                                          (S - 1) * max f, differing in memory)
// Gradient sync: each stage all-reduces (reduce-scatter + all-gather with ZeRO-1: same bytes) its
// float32 gradient shard across the D pipelines, ring over the slowest link between the stage and
// the stages holding its first layer in the other pipelines. Optimizer: the profile's seconds per
// parameter times the parameters whose states the rank updates.
//   step = max over pipelines p of (time_p + max over its stages of (sync + optimizer))
// Memory of a rank on stage j: its parameter shard * bytes_per_parameter, + zero_bytes_per_parameter
// (divided by D under ZeRO-1), + activations of the micro-batches in flight (1F1B: min(S - j, n);
// GPipe: n) and one micro-batch's transient values, + the device's reserved bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hspmd/models/llama_config.h"
#include "hspmd/planner/profile.h"
#include "hspmd/resolve/topology.h"
#include "hspmd/sharding/strategy.h"
#include "hspmd/specialize/schedule.h"

namespace hspmd::planner {

struct CostOptions {
  int64_t seq_len = 4096;
  specialize::ScheduleKind schedule = specialize::ScheduleKind::k1F1B;
};

struct MemoryBreakdown {
  double parameters = 0;  // weights and gradient buffers of the rank's shard
  double zero_states = 0;  // optimizer states and synced gradients (sharded by ZeRO-1)
  double activations = 0;
  double reserved = 0;
  double total() const { return parameters + zero_states + activations + reserved; }
};

struct StagePrediction {
  std::string kind;  // the slowest device kind of the stage
  int tp = 1;
  int layers = 0;
  double compute_seconds = 0;  // layers and ends, per micro-batch
  double tp_comm_seconds = 0;  // TP all-reduces per micro-batch (0 when inside the profiled layer)
  double p2p_seconds = 0;      // to the next stage, per micro-batch
  double sync_seconds = 0;     // gradient sync, per step
  double optimizer_seconds = 0;
  double per_micro_batch() const { return compute_seconds + tp_comm_seconds + p2p_seconds; }
};

struct PipelinePrediction {
  std::vector<StagePrediction> stages;
  double pipeline_seconds = 0;  // forward + backward of all micro-batches, with the bubble
  double end_seconds = 0;       // + the slowest stage's sync and optimizer
};

struct RankPrediction {
  int rank = 0;
  int pipeline = 0, stage = 0;
  std::string kind;
  MemoryBreakdown memory;
  double capacity = 0;  // the device's memory from the cluster spec
};

struct Prediction {
  double step_seconds = 0;
  std::vector<PipelinePrediction> pipelines;
  std::vector<RankPrediction> ranks;  // ascending rank
  bool fits = true;                   // every rank's memory.total() <= capacity
  // "rank 3 (H20): needs 101.2 GiB (...) of 95.6 GiB" for each rank that does not fit.
  std::vector<std::string> overflows;
};

// Parameter counts of the model's parts, from models::llama_parameters.
struct ModelShape {
  int64_t layers = 0, hidden = 0, ffn = 0, heads = 0, kv_heads = 0, vocab = 0;
  double layer_parameters = 0;  // one decoder layer
  double embedding_parameters = 0;
  double head_parameters = 0;  // final norm + lm_head
  static ModelShape of(const models::LlamaConfig& config);
  // The parameters a pipeline stage of `layers` decoder layers holds: the embedding on the first
  // stage, the final norm and lm_head on the last (both for the whole model in one stage). Every
  // price of a stage's memory, gradient sync and optimizer step starts from this one count.
  double stage_parameters(int layers, bool first, bool last) const;
  // Whether TP degree t splits the heads, KV heads, hidden size, FFN and vocabulary evenly (the
  // degrees the runtime's Llama plans accept, so the ones worth profiling and planning).
  bool tp_divides(int t) const;
};

class CostModel {
 public:
  // Keeps references: the topology and profile must outlive the model.
  CostModel(const models::LlamaConfig& config, const resolve::Topology& topology, const Profile& profile,
            CostOptions options = {});

  // Errors: a rank outside the cluster, a (kind, TP) the profile lacks, a strategy that does not
  // cover the model's layers.
  Prediction predict(const sharding::Strategy& strategy) const;
  // The same model priced at another sequence length (the dispatcher prices single sequences).
  CostModel at_seq_len(int64_t seq_len) const;

  // Building blocks, shared with the planner so both price a stage the same way.
  // Seconds of one micro-batch on a stage of `ranks` holding `layers` layers (ends on the last stage).
  double stage_compute(const std::string& kind, int tp, int layers, bool last, int micro_batch_size) const;
  double stage_tp_comm(const std::vector<int>& ranks, int layers, int micro_batch_size) const;
  // The TP collectives of the embedding (first stage) and of the head and loss (last stage).
  double ends_tp_comm(const std::vector<int>& ranks, bool first, bool last, int micro_batch_size) const;
  double p2p(int from, int to, int micro_batch_size) const;
  double allreduce(const std::vector<int>& group, double bytes) const;
  MemoryBreakdown stage_memory(const std::string& kind, int tp, int layers, bool first, bool last,
                               int micro_batch_size, int in_flight, int data_parallel, bool zero1) const;
  // The slowest device kind among `ranks` (by profiled layer time at their TP degree).
  std::string stage_kind(const std::vector<int>& ranks) const;
  int in_flight(int num_stages, int stage, int num_micro_batches) const;

  const ModelShape& shape() const { return shape_; }
  const resolve::Topology& topology() const { return topology_; }
  const Profile& profile() const { return profile_; }
  const CostOptions& options() const { return options_; }

 private:
  double link_p2p_bandwidth(int a, int b) const;
  double link_latency(int a, int b) const;

  ModelShape shape_;
  const resolve::Topology& topology_;
  const Profile& profile_;
  CostOptions options_;
};

// What `hspmd explain --profile` and `hspmd plan` print:
//   predicted step time: 1.234 s (pipeline 0: 1.2 s, ...)
//   predicted memory per rank:
//     rank 0 (H800, pipeline 0 stage 2): 61.2 GiB = ... of 79.6 GiB
std::string to_string(const Prediction& prediction);

// "rank 3 (H20, pipeline 1 stage 0): 61.2 GiB = 40.1 GiB parameters + ... of 95.6 GiB"
std::string describe_memory(const RankPrediction& rank);

}  // namespace hspmd::planner
