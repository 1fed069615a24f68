// Distributed training of any model (models/model.h) under any annotation plan (a compiled strategy
// file): one DistTrainer per rank, each running its own executable graph (specialize/exec_graph.h) as a
// stage of a (possibly heterogeneous) pipeline. The single-process Trainer (runtime/trainer.h) is
// the one-rank case of this class; with the same options and data, every step's loss and the
// final weights of any strategy agree with it up to float rounding.
//
//   comm::GroupCache groups(store, rank, comm::gloo_backend());
//   std::shared_ptr<const models::Model> model = models::load_model("configs/llama-tiny.json");
//   DistTrainer t(model, dataset, model->compile_plan(strategy),
//                 {.train = {.steps = 20, .seq_len = 64, .global_batch_tokens = 512}}, rank, world, groups);
//   while (!t.done()) StepMetrics m = t.step();   // collective: every rank calls it; m is global
//   t.save("runs/ckpt");                          // collective; loadable under any other strategy
//
// The trainer sequences a few parts, each in its own file:
//   runtime/plan_cache.h       specialized plans (executable graph, schedule, memory, communicators)
//   runtime/training_state.h   this rank's slices of every parameter and its AdamW moments
//   runtime/step_runner.h      one global batch through this rank's schedule (F, B, each op)
//   dist_trainer.cc            construction, step (the runner's passes, Post, AdamW), evaluation
//   dist_trainer_checkpoint.cc save, restore, weight loading
//   dist_trainer_switch.cc     graph switching and what elastic recovery adds to it
//
// One step on a rank:
//   data   every rank reads the same global batch (same Loader, same seed) and splits it over the
//          plan's pipelines (data::split_global_batch, weights = micro-batch size x count); its own
//          pipeline's micro-batches are packed one by one. loss_scale = 1 / labelled tokens of the
//          GLOBAL batch, so every token weighs the same whatever pipeline or micro-batch it lands in.
//   F, B   in the order of the stage's schedule (GPipe or 1F1B); forward values B needs are kept per
//          micro-batch (with recompute only each layer's boundary: B replays the rest, see
//          specialize/exec_graph.h); each value is freed after its last reader; parameter gradients
//          are summed over micro-batches.
//   Post   gradient sync (deduced -> optimizer-state annotation: AR, SplitAR, SplitRS, BSR ...; in
//          buckets on a communication thread, mostly during B: runtime/bucketed_gradient_sync.h;
//          ZeRO-3 hands each gradient to it as B produces it, between its parameter gathers
//          on the same thread: runtime/step_runner.h),
//          the global gradient norm (each element counted once: one subgroup of a replicated
//          tensor, the first holder of each region inside it) and clipping, AdamW on the rank's
//          state shard, parameter gather (state -> parameter).
//   Loss   the sum of the loss of every micro-batch of every pipeline, counted once per pipeline.
// Communicators: the constructor connects every group a step will use, taken from the resolutions
// of the plan's Reshards, gradient syncs and gathers (collective; one sorted order on every rank),
// so the first step does not pay for connecting and an unreachable peer fails before training.
// Emulated devices (runtime/emulation.h): compute time is stretched by the rank's speed before
// each communication (so a slow stage hands over late, as a real one would), and every tensor is
// allocated from an allocator with the rank's capacity. Before the first step the rank's memory
// estimate (specialize/memory_estimate.h) is checked against that capacity.
//
// Graph switching (§7): switch_to(plan) moves every parameter and both AdamW moments from the
// current plan's layout to the new one's with ONE fused BSR (switching/switch_plan.h: one message
// per (sender, receiver) pair, slices a rank already holds copied locally), then the next step runs
// under the new plan. No checkpoint is written or read; step, data position and learning-rate
// schedule go on. Each plan is specialized (executable graph, pipelines, schedule, memory
// estimate, communicators) once per run and kept, so switching back costs only the BSR.
// With DistOptions::bf16_switches a switch moves nothing: the state stays under the plan the
// trainer was built with (or last moved to by switch_state_to, as elastic recovery does), and each
// step under another plan moves its bf16 parameters there and its gradients back
// (switching/bf16_switch_plan.h; the step's StepMetrics::bf16_switch says what moved).
// A rank the current plan does not use is a spare: it holds no state, reads the global batch (so
// its data position stays the run's) and joins only the step's final all-rank reduction of loss
// and gradient norm, so it knows both and can take part in the next switch. Every process of the
// run calls step() and switch_to() at the same points.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hspmd/comm/group_cache.h"
#include "hspmd/data/loader.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/models/model.h"
#include "hspmd/resolve/resolver.h"
#include "hspmd/resolve/fused_bsr.h"
#include "hspmd/resolve/topology.h"
#include "hspmd/runtime/compute_pacer.h"
#include "hspmd/runtime/emulation.h"
#include "hspmd/runtime/hf_weights.h"
#include "hspmd/runtime/reshard_exec.h"
#include "hspmd/runtime/sharded_checkpoint.h"
#include "hspmd/runtime/trace.h"
#include "hspmd/runtime/bucketed_gradient_sync.h"
#include "hspmd/runtime/checkpoint.h"
#include "hspmd/runtime/plan_cache.h"
#include "hspmd/graph/compute_device.h"
#include "hspmd/runtime/step_runner.h"
#include "hspmd/runtime/train_options.h"
#include "hspmd/runtime/training_state.h"
#include "hspmd/specialize/exec_graph.h"
#include "hspmd/specialize/memory_estimate.h"
#include "hspmd/specialize/pipeline_layout.h"
#include "hspmd/specialize/schedule.h"
#include "hspmd/switching/bf16_switch_plan.h"

namespace hspmd::runtime {

struct DistOptions {
  TrainerOptions train;  // as for the single-process Trainer
  specialize::ScheduleKind schedule = specialize::ScheduleKind::k1F1B;
  EmulatedDevice device;  // this rank's speed and memory
  bool trace = false;     // record a Chrome trace (tracer())
  std::string plan_name = "initial";            // of the plan given to the constructor, for logs
  const resolve::Topology* topology = nullptr;  // link tiers of switches; nullptr: one host
  // The ranks alive (sorted); empty: all. A restarted worker joining an elastic run starts as a
  // spare among the current members (elastic/elastic_run.h).
  std::vector<int> members{};
  // Dispatch by length (planner/dispatch_ahead.h): when set, a training step's global batch is split
  // over the current plan's pipelines by this instead of by token weight: result[p][m] = the segments
  // of micro-batch m of pipeline p, any count per pipeline (the schedule follows it). Every rank
  // must get the same split. Loss and gradients stay normalized by the global batch.
  std::function<data::BatchSplit(const std::vector<data::Segment>& global)> split_batch{};
  // How micro-batches are laid out (data/packing.h); kPackedFixed pads every row to seq_len.
  data::BatchLayout layout = data::BatchLayout::kPacked;
  // The output head and its loss fused or apart (models::ModelBuildOptions::fused_head_loss); unset:
  // the model's default. Every rank of a run must choose alike.
  std::optional<bool> fused_head_loss{};
  // Gradient buckets (runtime/bucketed_gradient_sync.h): the backward pass hands each bucket of
  // this many MiB of gradient to a communication thread as soon as its gradients are final, so its
  // reduction overlaps with the rest of the backward. 0: no overlap (every gradient synced in Post,
  // on the main thread), as on a GPU rank for now (its kernels' stream is not ordered with another
  // thread's copies; the CUDA backend's comm stream is to come). Results are the same either way.
  double grad_bucket_mb = 25;
  // Where each rank computes; unset: the host, or the GPU train.device names (runtime/rank_compute.h).
  // Set: another backend (the tests' fake device runs the CPU kernels behind device tensors).
  std::function<graph::ComputeDevice(int rank)> compute{};
  // The rank's communicators move its compute device's memory (NCCL on a GPU, runtime/comm_choice.h):
  // Reshards and gradient syncs run on device buffers. False: they move host memory (Gloo), and a
  // GPU rank stages its Reshards through the host (execute_reshard_staged).
  bool comm_on_device = false;
  // bf16-only switches (switching/bf16_switch_plan.h; needs train.precision bf16): the master
  // weights and AdamW moments stay under the plan the trainer is built with (the base, until a
  // switch_state_to or restore_under moves them); switch_to
  // another plan moves nothing then, and each step under it sends the parameters there as bf16
  // values and brings the float32 gradients back to the base, where AdamW steps. switch_to the
  // base again computes under it as before.
  bool bf16_switches = false;
};

// What one switch did, the same on every rank but rank_sent_bytes (times are the slowest rank's).
struct SwitchReport {
  std::string from, to;       // plan names
  bool specialized = false;   // the target plan was specialized now (false: taken from the cache)
  int64_t step = 0;           // optimizer steps taken before the switch
  int64_t sent_bytes = 0;     // over all ranks; slices a receiver held were copied locally
  int64_t local_copy_bytes = 0;
  std::map<resolve::LinkTier, int64_t> sent_by_tier;  // as planned
  // Measured: the bytes every rank handed to its sends, summed by the link tier of sender and
  // receiver (the cluster's, DistOptions::topology). Equal to sent_by_tier when the wire did what
  // the plan said.
  std::map<resolve::LinkTier, int64_t> wire_by_tier;
  std::map<int, int64_t> sent_by_rank;  // rank -> bytes it sends, as planned
  int64_t rank_sent_bytes = 0;          // what this rank put on the wire (measured)
  int messages = 0;                     // (sender, receiver) pairs
  std::string algorithm = "fused";      // resolve::bsr_algorithm_name
  double bsr_seconds = 0;               // the fused BSR
  double total_seconds = 0;             // validation, specialization, connecting and the BSR
  // A bf16-only switch (DistOptions::bf16_switches): nothing moved now; each step under `to` moves
  // these bytes (as planned; 0 when `to` is the base, `base`).
  bool bf16_only = false;
  std::string base;
  int64_t params_out_bytes = 0, grads_back_bytes = 0;

  nlohmann::json to_json() const;  // one metrics JSONL line ({"event": "switch", ...})
  std::string to_string() const;   // one log line
};

// What happened to the step a failure interrupted (finish_interrupted_step).
struct InterruptedStep {
  bool in_progress = false;     // a step was under way (not a save or a switch between steps)
  bool rolled_forward = false;  // the step's update was applied on every survivor
  StepMetrics metrics;          // of that step when rolled forward (loss and grad norm global)
};

// A switch whose state cannot be assembled: some slice's every holder is dead. Nothing has moved;
// the survivors must restore a checkpoint instead (restore_under).
class StateLost : public Error {
 public:
  using Error::Error;
};

// A switch that was refused before any byte moved (an invalid plan, or one that does not fit a
// rank's memory): the trainer stays under its current plan and can go on training.
class SwitchRefused : public Error {
 public:
  using Error::Error;
};

class DistTrainer {
 public:
  // The dataset and groups must outlive the trainer. Errors: as Trainer, plus a plan that does not
  // fit the model or this rank's memory (naming the rank and the figures).
  DistTrainer(std::shared_ptr<const models::Model> model, const data::TokenDataset& dataset,
              const sharding::AnnotationPlan& plan, DistOptions options, int rank, int world_size,
              comm::GroupCache& groups);
  // Without a dataset (nullptr): every step trains on the batch give_batch() hands it (the Python
  // API's trainer.step(batch)); the checkpoint's data position stays at its start.
  DistTrainer(std::shared_ptr<const models::Model> model, const data::TokenDataset* dataset,
              const sharding::AnnotationPlan& plan, DistOptions options, int rank, int world_size,
              comm::GroupCache& groups);
  ~DistTrainer();
  DistTrainer(const DistTrainer&) = delete;
  DistTrainer& operator=(const DistTrainer&) = delete;

  StepMetrics step();  // collective (every process of the run); a spare's loss is the global one
  // The global batch of the next step, instead of the dataset's next one (every rank gives the same
  // segments; each is one row of its micro-batch, data::BatchLayout::kRows: its own attention
  // sequence, positions from 0, never packed with another). Kept until that step completes, so a
  // step redone after a failure (elastic training) trains on it again.
  void give_batch(std::vector<data::Segment> segments);
  // Collective: the token-weighted mean loss of one global batch (forward only, current plan).
  double evaluate(const std::vector<data::Segment>& segments);
  // Collective: the token-weighted mean loss, forward only under the current plan, over the first
  // batches (the run's seq_len and global_batch_tokens, a fixed order) of `dataset` until
  // `max_tokens` tokens or the end of one epoch. The weights do not change.
  double evaluate(const data::TokenDataset& dataset, int64_t max_tokens);
  bool done() const { return step_ >= options_.train.steps; }
  int64_t step_count() const { return step_; }

  // Collective: writes a strategy-independent checkpoint (runtime/sharded_checkpoint.h).
  void save(const std::string& dir);
  // Collective: continues from a checkpoint saved under any strategy (or by the single-process
  // trainer): weights and AdamW moments resharded to this plan, step and data position restored.
  void restore(const std::string& dir);
  // The same from a whole checkpoint in memory (each rank takes its slices).
  void restore(const Checkpoint& checkpoint);
  // Replaces the initial weights with whole tensors by Hugging Face name (each rank takes its
  // slices); optimizer state stays fresh. Error naming a missing or mis-shaped tensor.
  void load_weights(const graph::TensorMap& weights);
  // The same from Hugging Face files, each rank reading only the rows of its own slices.
  void load_weights(const HfWeights& weights);

  // Collective over every process of the run: moves the training state to `plan` (see above).
  // Throws SwitchRefused, on every rank alike, when the plan is invalid or exceeds a rank's memory;
  // then nothing has moved and training goes on under the current plan.
  // `algorithm` (resolve/fused_bsr.h) other than kFusedHeuristic runs one of the paper's per-tensor
  // baselines instead, for comparison (bench/switch_bench, bench/bsr_algorithms.sh): one BSR per
  // tensor, one after the other.
  // `dead`: ranks that failed (elastic recovery): they send nothing, every slice comes from a
  // surviving holder, and parameter values are taken from the optimizer-state layout (the slices
  // an interrupted ZeRO-1 gather may have left stale are not used). Throws StateLost when a slice
  // has no surviving holder, on every rank alike, before anything moved.
  // With DistOptions::bf16_switches, switch_to moves nothing (switch_compute_to, see above) and
  // `dead` must be empty: recovery calls switch_state_to.
  SwitchReport switch_to(const sharding::AnnotationPlan& plan, const std::string& name,
                         resolve::BsrAlgorithm algorithm = resolve::BsrAlgorithm::kFusedHeuristic,
                         const std::vector<int>& dead = {});
  // The full switch whatever DistOptions::bf16_switches says: the master weights and AdamW moments
  // move to `plan` (from the survivors when `dead` is not empty), which becomes the base of any
  // later bf16-only switch; the bf16 compute copies are dropped, so the next step computes under
  // `plan`. Elastic recovery and a joining worker's admission move the state this way.
  SwitchReport switch_state_to(const sharding::AnnotationPlan& plan, const std::string& name,
                               resolve::BsrAlgorithm algorithm = resolve::BsrAlgorithm::kFusedHeuristic,
                               const std::vector<int>& dead = {});

  // Elastic training (docs/elastic.md) commits each step and each switch through the run's store:
  // `step` is called with the global totals {squares, loss} once they are known and before any
  // weight changes on this rank; `switch_done` after this rank has its part of a switch and before
  // it adopts the new layout (it returns once every member has its part, or throws).
  struct Commits {
    std::function<void(int64_t step, const std::vector<double>& totals)> step;
    std::function<void()> switch_done;
  };
  void set_commits(Commits commits) { commits_ = std::move(commits); }
  // After a failure interrupted step() (or a switch or save) on some rank, and the survivors agreed
  // on `members` (the surviving ranks, sorted): this rank's communicators are gone (the caller
  // reset its GroupCache to the new generation), and the step is settled without communication:
  // with the totals some rank committed it is applied here too (when it was not yet), else it is
  // discarded (the data position goes back to its start, so the redone step sees the same tokens).
  // The step in progress is step_count() + 1.
  InterruptedStep finish_interrupted_step(const std::vector<int>& members,
                                          const std::optional<std::vector<double>>& committed);
  // Checkpoint fallback: moves to `plan` holding nothing, then restores `dir` (collective over the
  // members). With bf16-only switches `plan` becomes the base and the compute copies are dropped.
  void restore_under(const sharding::AnnotationPlan& plan, const std::string& name, const std::string& dir);
  const std::vector<int>& members() const { return members_; }
  // A worker joining a running job takes its progress (steps taken, data position) before the
  // switch that gives it state.
  void adopt_progress(int64_t step, const data::LoaderState& loader);
  const std::string& plan_name() const;
  // Plans specialized so far by this trainer (a switch back to a known plan adds none).
  int specializations() const { return plans_.size(); }
  // Whether this rank trains under the current plan (false: a spare).
  bool active() const;

  // The gradient buckets of the last training step, as indices into the rank's parameters in the
  // model's order (runtime/bucketed_gradient_sync.h).
  const std::vector<std::vector<size_t>>& gradient_buckets() const { return grad_sync_.buckets(); }

  // This rank's parameter shards, each element once over all ranks (see the norm above), float32.
  std::vector<SavedShard> parameter_shards() const { return state_.shards(rank_, false); }
  // The same plus the AdamW moments ("<param>.exp_avg", "<param>.exp_avg_sq").
  std::vector<SavedShard> state_shards() const { return state_.shards(rank_, true); }
  // The data position (the start of an epoch when the trainer has no dataset).
  const data::LoaderState& loader_state() const;
  // Collective over every process of the run: the whole tensor `name` (a parameter, or one of its
  // AdamW moments "<param>.exp_avg" / "<param>.exp_avg_sq"), float32, on every rank: each rank
  // places the slice it counts once (as in the checkpoint) into zeros and all ranks sum, so every
  // element is exactly its holder's value. Error naming an unknown tensor.
  Tensor gather_state_tensor(const std::string& name);

  int rank() const { return rank_; }
  const specialize::ExecGraph& exec_graph() const;
  const std::vector<specialize::Task>& schedule() const;
  // Where this rank sits in the pipelines found in its graph (specialize/pipeline_layout.h).
  const specialize::PipelineLayout& pipelines() const;
  // "rank 2: pipeline 1, stage 1/2 [2], 4 micro-batches of 1, 1F1B: F0 F1 B0 ..., memory ~3.1 MiB"
  std::string describe() const;
  Tracer& tracer() { return tracer_; }
  // The compute the emulated device stretches (forward, backward, optimizer), since construction.
  const ComputeTime& compute_time() const { return pacer_.total(); }
  const models::Model& model() const { return *model_; }
  // The model's training graph as this trainer built it (precision, fused head).
  const models::ModelGraph& model_graph() const { return graph_; }

 private:
  // ---- graph switching (dist_trainer_switch.cc) ----
  // This rank's shards of every tensor of a switch plan, before and after: sources[i] and
  // destinations[i] for the plan's tensor i.
  struct StateTransfer {
    std::vector<LocalShard> sources, destinations;
  };
  // The specialized target plan (collective: every rank agrees it could specialize it, else
  // SwitchRefused everywhere); `specialized`: it was built now.
  SpecializedPlan& switch_target(const sharding::AnnotationPlan& plan, const std::string& name,
                                 comm::Communicator& world, bool& specialized);
  switching::SwitchPlan plan_state_move(const SpecializedPlan& next, const std::string& name,
                                        resolve::BsrAlgorithm algorithm, const std::vector<int>& dead) const;
  // Allocates `moved` (a shard kept in place is the old tensor, not a copy).
  StateTransfer state_transfer(const switching::SwitchPlan& sp, ShardedState& moved, bool after_failure);
  // ---- bf16-only switches (dist_trainer_switch.cc) ----
  // The plan the next steps compute under, and the two moves of each such step.
  struct Bf16Compute {
    SpecializedPlan* plan;
    switching::Bf16SwitchPlan moves;
  };
  SwitchReport switch_compute_to(const sharding::AnnotationPlan& plan, const std::string& name);
  // Fills compute_state_ (laid out under bf16_->plan) with the base values rounded to bf16.
  void send_bf16_parameters(Bf16SwitchTraffic& traffic);
  // Moves compute_state_'s gradients, synced under bf16_->plan (`synced`, one per
  // compute_state_.tensors entry), to the base's optimizer-state layout: one per state_.tensors entry.
  std::vector<Tensor> bring_back_gradients(const std::vector<Tensor>& synced, Bf16SwitchTraffic& traffic);
  // The plan the next step computes under (bf16_->plan, else the base).
  const SpecializedPlan& computing() const { return bf16_ ? *bf16_->plan : *current_; }
  // This rank's part of one global batch under the current plan (the step runner's run); returns
  // the sum of its micro-batch losses.
  double run_passes(const std::vector<data::Segment>& segments, int64_t labels, bool train,
                    std::optional<data::BatchLayout> layout = std::nullopt);

  // Restores the state from `read` after checking that the saved run (its options and seed) had this
  // run's data stream; `source` names it in errors.
  void restore_from(const StateReader& read, const TrainerOptions& saved, uint64_t saved_seed, int64_t step,
                    const data::LoaderState& loader, const std::string& source);
  // The data position moved to `state` (a restore, a redone step); nothing without a dataset.
  void reset_loader(const data::LoaderState& state);
  // Returns the global loss; updates weights. `traffic`: the step computed under bf16_->plan.
  double post(const Tensor& device_totals, Bf16SwitchTraffic* traffic);
  // AdamW on this rank's state with the synced gradients and the global {squares, loss} totals;
  // `gather` = false skips the ZeRO-1 parameter gather (recovery: the old groups are gone).
  void apply_update(std::vector<Tensor>& grads, const std::vector<double>& totals, bool gather);
  std::shared_ptr<comm::Communicator> all_ranks_group();

  DistOptions options_;
  std::shared_ptr<const models::Model> model_;
  models::ModelGraph graph_;
  const data::TokenDataset* dataset_;
  int rank_, world_size_;
  graph::ComputeDevice compute_;  // where the rank computes (options_.train.device)
  std::unique_ptr<Allocator> allocator_;
  // A GPU rank's communication buffers when its communicators move host memory (Gloo), staged by
  // execute_reshard_staged. Null on a host rank and with comm_on_device: buffers from allocator_.
  std::unique_ptr<Allocator> comm_memory_;
  CommSession session_;
  resolve::ResolveCache cache_;
  PlanCache plans_;
  SpecializedPlan* current_ = nullptr;
  ShardedState state_;
  std::optional<Bf16Compute> bf16_;
  ShardedState compute_state_;  // during a step under bf16_->plan: its bf16-valued parameters
  std::unique_ptr<data::Loader> loader_;
  graph::LrSchedule lr_schedule_;
  int64_t step_ = 0;
  std::vector<int> members_;  // the ranks alive: all at first, the survivors after a failure
  // The step in progress, kept until it completes so a failure can be settled: the data position
  // before it, and once gradients are synced (before the totals are known), those gradients.
  data::LoaderState step_start_;
  bool in_step_ = false;
  std::optional<std::vector<data::Segment>> given_batch_;  // give_batch()'s, until its step completes
  std::optional<std::vector<Tensor>> synced_grads_;
  Commits commits_;
  ComputePacer pacer_;
  double last_grad_norm_ = 0;
  Tracer tracer_;
  BucketedGradientSync grad_sync_;  // its thread uses the members above
  StepRunner runner_;  // computes with the members above
};

}  // namespace hspmd::runtime
