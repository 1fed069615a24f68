// CostModel: predicts the step time and each rank's peak memory of a strategy (sharding/strategy.h)
// on a cluster (resolve/topology.h) from a profile (planner/profile.h), without running anything.
//
//   CostModel cm(*load_model("configs/llama-32b.json"), topology, profile, {.seq_len = 4096});
//   Prediction p = cm.predict(Strategy::from_file("table9-32b-16h800-32h20.json"));
//   p.step_seconds;              // the slowest pipeline, its gradient sync and optimizer
//   p.ranks[r].memory.total();   // peak bytes of rank r
//   p.fits                       // every rank within its device's memory
//
// Per stage j of a pipeline running n micro-batches of b sequences of s tokens (kind = the stage's
// slowest device kind, t = its TP degree, c = its CP degree; the stage has t x c ranks):
//   f_j = layers_j * layer_c(t, b, s)                     profiled fwd+bwd of one decoder layer
//       + [last stage] ends(t, b * s' / c)                embedding, head and loss
//       + [unless the profile measured them inside the layer] 4 all-reduces per layer of
//         b*s'/c*hidden activations over the stage's TP group (ring, on the group's slowest link),
//         one more on the first stage (embedding) and on the last (head) with the loss's gather
//       + [c > 1] per layer, the all-gathers of K and V over the CP group (forward) and the
//         reduce-scatters of their gradients (backward): 4 collectives of b*s'*kv_dim/t elements,
//         + the kind's measured lockstep per layer (Profile::cp: waits for the group's slowest rank)
//       + [not last] activation send + gradient receive to the next stage (p2p on that link)
// Context parallelism (docs/context-parallelism.md): the zigzag layout pads every sequence to s'
// (a multiple of 2c) and gives each CP rank two chunks whose causal attention work is exactly
// 1/c of the sequence's, so layer_c(t, b, s) = b (a s'^2 + c1 s') / c + c0: the profiled layer
// with both its attention and its per-token work divided by c (the padding is the imbalance). When
// the profile measured CP ranks of degree c for the kind (Profile::cp, at TP 1), layer_c is that
// measurement at TP 1, and at TP t the share above times the measurement's ratio to TP 1's share
// (the ends likewise): a CP rank's packed-order copies, cut query tiles and index Reshards are a
// fixed cost per layer that the 1/c share leaves out.
// Sequence parallelism pads each sequence further, to a multiple of the SP stage's t x c ranks (the
// runtime pads every row to the common multiple of the plan's SP stages; a stage is priced at its
// own), so an SP stage's s' is a multiple of both.
// Sliding windows (Mistral, Gemma 3's local layers, models::ModelSizes::attention_windows): the
// attention term a s^2 is for full causal attention; it is scaled by the pairs a window shorter
// than the sequence leaves (ModelShape::attention_fraction, the mean over the model's layers: a
// stage is priced as holding average layers), with and without CP. The CP all-gathers stay whole:
// every rank still gathers every key (docs/context-parallelism.md), only its kernel work shrinks.
//   pipeline time = sum_j f_j + (n - 1) * max_j f_j       (1F1B and GPipe have the same bubble,
//                                                          (S - 1) * max f, differing in memory)
// Gradient sync: each stage all-reduces (reduce-scatter + all-gather with ZeRO-1: same bytes) its
// float32 gradient shard across its replicas: the D pipelines and, within each, the stage's CP
// ranks (weights are duplicated over CP, their gradients partial). The ring runs over the slowest
// link among those replicas. Optimizer: the profile's seconds per parameter times the parameters
// whose states the rank updates (ZeRO-1 shards them over every replica, D x c).
//   step = max over pipelines p of (time_p + max over its stages of (sync + optimizer))
// Memory of a rank on stage j: its parameter shard * bytes_per_parameter, + zero_bytes_per_parameter
// (divided by D under ZeRO-1), + activations of the micro-batches in flight (1F1B: min(S - j, n);
// GPipe: n) and one micro-batch's transient values, + the device's reserved bytes.
// ZeRO-2 (G = the fewest micro-batches any pipeline runs): the sync is G reduce-scatters of the
// gradient shard and one parameter all-gather; a pipeline running G micro-batches keeps no float32
// accumulator, only a backward pass's whole gradient beyond the forward transients (as
// specialize/memory_estimate.h). ZeRO-3: every replica keeps a 1/(D x c) shard of its stage's
// weights too; each micro-batch's forward and backward passes all-gather the stage's parameters
// (recompute replays read B's gathers) and the backward reduce-scatters each gradient into its
// shard, on the computing thread (3 half-rings of the stage's parameters per micro-batch, each layer
// over the ring of its holders, which in pipelines of different shapes differ from layer to layer);
// memory as the runtime's estimate counts it (the gather schedule's peak, the
// largest parameter's whole gradient). Sequence parallelism: per layer 4 all-gathers + 4
// reduce-scatters in place of 4 all-reduces (the same ring bytes); the norms and elementwise work
// the TP ranks otherwise duplicate (the part of the profiled per-token work that does not shrink
// from TP 1 to TP t) run on 1/t of the tokens; and 2 kept + 5 transient hidden-wide values per
// token are held for 1/t of the tokens.
// Overlap (grad_bucket_mb > 0, the runtime's --grad-bucket-mb): the gradient reduce (ZeRO-0's
// all-reduce, ZeRO-1/2's reduce-scatters) runs in buckets behind the backward pass; what stays
// exposed per reduction is the last bucket's, or what the backward pass (2/3 of the stage's
// per-micro-batch compute and collectives) cannot cover. docs/planner.md has the details.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "hspmd/models/model.h"
#include "hspmd/planner/profile.h"
#include "hspmd/resolve/topology.h"
#include "hspmd/sharding/strategy.h"
#include "hspmd/specialize/schedule.h"

namespace hspmd::planner {

struct CostOptions {
  int64_t seq_len = 4096;
  specialize::ScheduleKind schedule = specialize::ScheduleKind::k1F1B;
  // The runtime's gradient buckets (--grad-bucket-mb, runtime/bucketed_gradient_sync.h): MiB of
  // float32 gradient each; 0: every gradient synced after the backward pass, nothing overlapped.
  double grad_bucket_mb = 25;
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
  int cp = 1;
  bool sequence_parallel = false;
  int layers = 0;
  double compute_seconds = 0;  // layers and ends, per micro-batch
  double tp_comm_seconds = 0;  // TP all-reduces per micro-batch (0 when inside the profiled layer)
  double cp_comm_seconds = 0;  // K/V all-gathers and their gradients' reduce-scatters, per micro-batch
  double p2p_seconds = 0;      // to the next stage, per micro-batch
  // ZeRO-3, per micro-batch: the parameter all-gathers of F and B and the gradient reduce-scatters of B.
  double zero3_comm_seconds = 0;
  // Gradient sync, per step, as exposed after the pipeline (ZeRO-2: its gradient groups'
  // reduce-scatters and the parameter all-gather); sync_hidden_seconds more ran behind backward passes.
  double sync_seconds = 0;
  double sync_hidden_seconds = 0;
  double optimizer_seconds = 0;
  double per_micro_batch() const {
    return compute_seconds + tp_comm_seconds + cp_comm_seconds + p2p_seconds + zero3_comm_seconds;
  }
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
  int gradient_groups = 0;            // ZeRO-2: the gradient reduce-scatters per step; 0 without ZeRO-2
  bool parameters_sharded = false;    // ZeRO-3
  // "rank 3 (H20): needs 101.2 GiB (...) of 95.6 GiB" for each rank that does not fit.
  std::vector<std::string> overflows;
};

// The model's sizes (models::Model::sizes) with what the planner derives from them.
struct ModelShape : models::ModelSizes {
  static ModelShape of(const models::Model& model);
  // The input embedding is the output head too (a config's "tie_word_embeddings"): its holders are
  // every pipeline's first and last stages.
  bool tied_embeddings = false;
  // The parameters a pipeline stage of `layers` decoder layers holds: the embedding on the first
  // stage, the final norm and lm_head on the last (both for the whole model in one stage). Every
  // price of a stage's memory, gradient sync and optimizer step starts from this one count.
  double stage_parameters(int layers, bool first, bool last) const;
  // The attention work of a decoder layer on a sequence of s tokens relative to full causal
  // attention's, which a profile's a * s^2 term is (s (s + 1) / 2 query-key pairs), averaged over
  // the model's layers: a layer with window W < s has W (W + 1) / 2 + (s - W) W pairs. 1 when no
  // layer's window is shorter than s.
  double attention_fraction(double s) const;
  // Whether TP degree t splits the heads, KV heads, hidden size, FFN and vocabulary evenly (the
  // degrees a model's plans accept, so the ones worth profiling and planning).
  bool tp_divides(int t) const;
  // The largest weight matrix of a decoder layer (the MLP's or attention's projections), whole.
  double largest_layer_matrix() const;
  // What ZeRO-3's gather schedule (specialize/gather_units.h) holds at most, in parameters of one TP
  // rank of degree `tp`, on a stage of `layers` layers: a layer's unit is gathered one unit ahead,
  // at the previous unit's last reader, which still holds its own last-read matrix (F: the down
  // projection; the embedding whole), so two units at once.
  double peak_gathered_parameters(int layers, bool first, bool last, int tp) const;
};

class CostModel {
 public:
  // Keeps references: the topology and profile must outlive the cost model (the model need not:
  // it is priced by its sizes, copied).
  CostModel(const models::Model& model, const resolve::Topology& topology, const Profile& profile,
            CostOptions options = {});

  // Errors: a rank outside the cluster, a (kind, TP) the profile lacks, a strategy that does not
  // cover the model's layers.
  Prediction predict(const sharding::Strategy& strategy) const;
  // The same model priced at another sequence length (the dispatcher prices single sequences).
  CostModel at_seq_len(int64_t seq_len) const;

  // Building blocks, shared with the planner so both price a stage the same way. A stage's `ranks`
  // are CP-outer, TP-inner (sharding/strategy.h): its TP group is the first `tp` of them (all of
  // them when cp = 1), its CP group every tp-th.
  // Seconds of one micro-batch on a stage of `ranks` holding `layers` layers (ends on the last stage).
  // `sequence_parallel`: the per-token work TP duplicates (duplicated_per_token) runs on 1/tp of the tokens.
  double stage_compute(const std::string& kind, int tp, int layers, bool last, int micro_batch_size,
                       int cp = 1, bool sequence_parallel = false) const;
  // Seconds per token of a layer that every rank of a TP-t group does whole (norms, residual adds,
  // elementwise work): the profiled per-token work c1 is m / t + e, so e = (t c1(t) - c1(1)) / (t - 1),
  // within [0, c1(t)]; 0 when the profile lacks TP 1 for the kind.
  double duplicated_per_token(const std::string& kind, int tp) const;
  // `sequence_parallel`: the all-reduces become the all-gathers and reduce-scatters the resolver
  // produces instead (docs/memory.md): per layer 4 of each, the same ring bytes and latencies.
  double stage_tp_comm(const std::vector<int>& ranks, int layers, int micro_batch_size, int cp = 1,
                       bool sequence_parallel = false) const;
  // The K/V all-gathers and gradient reduce-scatters of `layers` layers over the stage's CP group.
  double stage_cp_comm(const std::vector<int>& ranks, int layers, int micro_batch_size, int cp) const;
  // The TP collectives of the embedding (first stage) and of the head and loss (last stage).
  double ends_tp_comm(const std::vector<int>& ranks, bool first, bool last, int micro_batch_size, int cp = 1,
                      bool sequence_parallel = false) const;
  double p2p(int from, int to, int micro_batch_size, int cp = 1) const;
  // Ring all-reduce of `bytes` over `group`, at the group's slowest link. Linear in the group's size
  // (see collective_link).
  double allreduce(const std::vector<int>& group, double bytes) const;
  // The bus bandwidth and per-message latency of a collective over `group`: the slowest link between
  // any two of its members. Up to 16 members every pair is read; above, a ring through each node's
  // members and one through the nodes (linear in the group, not quadratic): exact on a spec's link
  // tiers (intra-node bandwidth per kind, one inter-node figure); a spec's bandwidth_matrix is read
  // on those rings only.
  std::pair<double, double> collective_link(const std::vector<int>& group) const;
  // A ring all-reduce of `bytes` over n ranks whose slowest link is collective_link's pair.
  static double ring_allreduce(int n, std::pair<double, double> link, double bytes);
  // Ring all-gather (or reduce-scatter) whose gathered result has `bytes`: (n - 1) / n of them per rank.
  double allgather(const std::vector<int>& group, double bytes) const;
  // The same over n ranks whose slowest link is collective_link's pair.
  static double ring_allgather(int n, std::pair<double, double> link, double bytes);
  // ZeRO-3, per micro-batch on a stage of `layers` layers (and the ends): F and B each all-gather
  // every gather unit (a layer, the embedding, the final norm and head) of one TP rank's shard, in
  // the weights' element bytes, over the n replicas on `link`, and B reduce-scatters its float32
  // gradient into the shards: 3 half-rings per unit.
  double zero3_comm(const std::string& kind, int n, std::pair<double, double> link, int layers, bool first,
                    bool last, int tp) const;
  // One gradient reduction round (`reduce` seconds) as it stays exposed after the backward pass that
  // completes it: its buckets leave as B finishes their gradients, so all but the last one
  // (`last_bucket` seconds) run behind the `backward` seconds left of B, and no more than those.
  static double exposed_reduce(double reduce, double last_bucket, double backward);
  // Float32 gradient bytes of the bucket the runtime reduces last for a stage (the first parameters
  // in model order): buckets are filled in reverse model order, each at most grad_bucket_mb unless
  // one tensor is larger (the tensors: shape_'s matrices, a layer's small ones together).
  double last_bucket_bytes(int layers, bool first, bool last, int tp) const;
  // `gradient_shard`: ZeRO-2 with each of this pipeline's micro-batches a gradient group of its own
  // (it runs the fewest micro-batches of the step; see the header): no whole gradient accumulator
  // lives between backward passes. `sequence_parallel`: the stage's activations between its TP
  // blocks are split by tokens (the header).
  // `parameter_shard`: ZeRO-3 (the header); implies the states' and gradients' shards.
  MemoryBreakdown stage_memory(const std::string& kind, int tp, int layers, bool first, bool last,
                               int micro_batch_size, int in_flight, int data_parallel, bool zero1,
                               int cp = 1, bool gradient_shard = false, bool sequence_parallel = false,
                               bool parameter_shard = false) const;
  // The slowest device kind among `ranks` (by profiled layer time at TP degree `tp`; by default the
  // rank count, a stage without CP).
  std::string stage_kind(const std::vector<int>& ranks, int tp = 0) const;
  // Tokens of one sequence as a stage of CP degree cp lays them out: padded to a multiple of 2 cp
  // (the zigzag chunks) and of `sequence_parallel_ranks` (an SP stage's t x c, its token split);
  // the sequence length itself without either.
  double padded_seq_len(int cp, int sequence_parallel_ranks = 1) const;
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
  std::optional<LinkProfile> intra_link_, inter_link_;  // the profile's link tiers, looked up once
  // What predict() asks again and again with the same arguments: the links of small groups (a TP
  // group's collectives read every pair of its ranks) and the stages' last gradient buckets. The
  // planner predicts tens of thousands of strategies over the same groups and stage sizes. Shared by
  // copies (same topology and options); a mutex, as trainers may predict from more than one thread.
  struct Memo {
    std::mutex mutex;
    std::map<std::vector<int>, std::pair<double, double>> small_group_links;
    std::map<std::tuple<int, bool, bool, int>, double> last_buckets;
  };
  std::shared_ptr<Memo> memo_ = std::make_shared<Memo>();
  std::pair<double, double> uncached_collective_link(const std::vector<int>& group) const;
  double uncached_last_bucket_bytes(int layers, bool first, bool last, int tp) const;
};

// What `hspmd explain --profile` and `hspmd plan` print:
//   predicted step time: 1.234 s (pipeline 0: 1.2 s, ...)
//   predicted memory per rank:
//     rank 0 (H800, pipeline 0 stage 2): 61.2 GiB = ... of 79.6 GiB
std::string to_string(const Prediction& prediction);

// "rank 3 (H20, pipeline 1 stage 0): 61.2 GiB = 40.1 GiB parameters + ... of 95.6 GiB"
std::string describe_memory(const RankPrediction& rank);

}  // namespace hspmd::planner
