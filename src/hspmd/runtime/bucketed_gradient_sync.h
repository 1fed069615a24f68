// The gradient sync in buckets, overlapped with the backward pass. A rank's parameters are grouped,
// in reverse model order (the order the backward pass finishes their gradients), into buckets of
// at most `bucket_bytes` of gradient (a larger tensor is a bucket of its own). Once every gradient
// of a bucket is final the bucket goes to a communication thread (runtime/comm_thread.h), which
// reduces it (runtime/gradient_sync.h) while the backward pass computes the next layers; so only
// the last bucket's reduction is left when the backward ends.
//
// When a gradient is final: under ZeRO-0/1 after this rank's last backward pass of the step for its
// layer (earlier micro-batches only add to it; Post waits for the buckets); under ZeRO-2 after the
// last backward pass of each group of micro-batches, whose sum is then reduced into the shard (the
// bucket takes the group's gradient and frees it once reduced; the pass waits for its buckets at
// its end, so the group's last bucket is what stays exposed).
//
//   BucketedGradientSync sync(rank, 25 << 20, /*on_thread=*/true, parts);
//   sync.start(state, step);                // each training step: buckets of the state's tensors
//   sync.begin_round(/*into_shards=*/false);  // the backward pass that completes the gradients
//   ... sync.gradient_done(i) as B finishes state.tensors[i].grad ...
//   sync.end_round();
//   std::vector<Tensor> grads = sync.finish();  // Post: the rest, then every synced gradient
//
// Every holder of a parameter reduces it in the same order (buckets in reverse model order, each
// tensor in that order), so the thread's collectives match their peers' whatever the buckets of
// the other ranks are. The main thread waits for the thread only where it used to wait for the
// reductions themselves (Post, ZeRO-2's group ends): no dependency between ranks is new.
// The thread communicates on the "grad" channel (comm/group_cache.h): its own communicators, so it
// never shares a Gloo context with the main thread's pipeline ("F", "B") or Post ("post") traffic.
//
// ZeRO-3 (every backward pass a group of its own) reduces each gradient into its shard as B
// produces it: a bucket is the gradients of one op of B (gradients_produced), handed over at once,
// in the order B produces them, and B hands over the next only once the thread has reduced the one
// before, so at most two whole gradients live (the memory estimate's count). ZeRO-3's parameter
// gathers run on the same thread (submit_after_gradients), so every rank's thread runs gathers and
// reductions in the order the sync after each op ran them, the order every holder of a parameter
// shares (specialize/gather_units.h: in B a layer is gathered only after the layer before it
// reduced its gradients). The main thread waits for a gather only where it reads the layer
// (wait_for), and for the pass's last bucket at the pass's end (end_round).
//
// bucket_bytes 0 turns the overlap off: ZeRO-0/1 reduce every parameter in Post, on the main
// thread, ZeRO-2 reduces each group after its backward pass and ZeRO-3 each gradient after the op
// producing it, and its gathers run where they are submitted, on the main thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "hspmd/graph/compute_device.h"
#include "hspmd/resolve/resolver.h"
#include "hspmd/runtime/comm_thread.h"
#include "hspmd/runtime/compute_pacer.h"
#include "hspmd/runtime/reshard_exec.h"
#include "hspmd/runtime/trace.h"
#include "hspmd/runtime/training_state.h"

namespace hspmd::runtime {

// Buckets of tensors whose gradients take bytes[i]: indices in reverse order, consecutive, each
// bucket at most bucket_bytes unless it is one tensor larger than that (bucket_bytes 0: one tensor
// per bucket).
std::vector<std::vector<size_t>> gradient_buckets(const std::vector<int64_t>& bytes, int64_t bucket_bytes);

// The trainer's parts the sync works with; they must outlive it. The resolve cache is shared with
// the main thread (it locks).
struct GradientSyncParts {
  resolve::ResolveCache& resolutions;
  CommSession& session;
  const graph::ComputeDevice& compute;
  ComputePacer& pacer;  // padded before each handoff: the bucket is ready at the emulated time
  Tracer& tracer;
};

class BucketedGradientSync {
 public:
  // `on_thread` false (a GPU rank: its kernels' stream is not ordered with another thread's
  // copies yet) syncs the buckets on the caller's thread, after the backward pass, as bucket_bytes 0.
  BucketedGradientSync(int rank, int64_t bucket_bytes, bool on_thread, GradientSyncParts parts);

  bool overlaps() const { return thread_.threaded(); }
  // A training step begins under `state` (which must outlive the step): forms its buckets.
  void start(ShardedState& state, int64_t step);
  // The step's buckets (after start()).
  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }
  // A backward pass that completes the gradients begins: ZeRO-2's last of a group (`into_shards`:
  // reduced into TensorState::grad_shard) or ZeRO-0/1's last (synced for finish()).
  void begin_round(bool into_shards);
  // state.tensors[i].grad is final for the round: hands every bucket now complete to the thread.
  void gradient_done(size_t i);
  // ZeRO-3, in an into-shards round: B has just produced these summands (this rank's, of
  // state.tensors[i]'s gradient, by i): waits for the bucket handed over before, then hands them
  // over to be reduced into their shards and freed.
  void gradients_produced(std::vector<std::pair<size_t, Tensor>> grads);
  // Queues `job` behind the gradients handed over before (returning its ticket for wait_for). On
  // the caller's thread without overlap.
  uint64_t submit_after_gradients(std::function<void()> job);
  // Returns once the job of `ticket` has run; throws the thread's error.
  void wait_for(uint64_t ticket) { thread_.wait_for(ticket); }
  // The backward pass of the round is over. ZeRO-2 waits here for the group's buckets, as it
  // waited for its reductions before they overlapped: no whole gradient outlives the pass (the
  // next forward's activations never meet them), and every holder has reduced the group before
  // any goes on. Throws the thread's error.
  void end_round();
  // Post: syncs what no round handed over (every tensor without overlap, or on a rank that ran no
  // backward; under ZeRO-2 takes the shards), waits for the thread and returns the synced
  // gradients in the state's order. Throws the thread's error, naming this rank.
  std::vector<Tensor> finish();
  // After a failure of the step: drops what is queued and waits for the running bucket; the
  // state's gradients are then the caller's to discard.
  void abandon();

 private:
  void hand_over(size_t bucket);
  uint64_t reduce_into_shards(std::vector<std::pair<TensorState*, Tensor>> bucket, const std::string& name);

  int rank_;
  int64_t bucket_bytes_;
  GradientSyncParts parts_;
  ShardedState* state_ = nullptr;
  int64_t step_ = 0;
  int kernel_threads_ = 1;  // the main thread's: the thread's kernels (adding shards) use as many
  std::vector<std::vector<size_t>> buckets_;
  std::vector<bool> done_;     // per tensor, in the current round
  bool into_shards_ = false;   // the current round's kind
  size_t next_bucket_ = 0;     // of the current round: the first not handed over
  bool synced_round_ = false;  // the current round is the one that syncs (not ZeRO-2's groups)
  std::vector<Tensor> synced_;
  uint64_t in_flight_ = 0;    // ZeRO-3: the ticket of the last bucket handed over
  int produced_buckets_ = 0;  // ZeRO-3's, of the step, for the trace
  CommThread thread_;  // last: joined before the members its jobs use go away
};

}  // namespace hspmd::runtime
