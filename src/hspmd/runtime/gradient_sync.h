// Gradient synchronization: a parameter's gradient as the backward ops leave it on this rank (its
// grad_annotation: partial over data-parallel replicas and CP ranks, one summand per rank) reduced
// into the layout its optimizer states have (state_annotation: all-reduce, or reduce-scatter into
// ZeRO shards; SplitRS / BSR across pipelines of other shapes). Collective over the holders.
//
// ZeRO-1 reduces each parameter once, in Post, from the gradient summed over the step's
// micro-batches. ZeRO-2 (AnnotationPlan::shard_gradients) reduces the gradient of each group of
// micro-batches as soon as its backward is done and adds it to the shard kept in
// TensorState::grad_shard, so no whole gradient lives from one group to the next:
//
//   reduce_into_shard(s, mb_grad, rank, cache, session, compute);   // s.grad_shard += reduce(mb_grad)
//   Tensor synced = take_synced_gradient(s, rank, cache, session, compute);   // in Post
//
// The reductions run on the "grad" channel (kGradientChannel): a communication thread runs them
// during the backward pass (runtime/bucketed_gradient_sync.h) on communicators of their own,
// ZeRO-3's in the order B produces the gradients, between its parameter gathers.
//
// `compute` is the rank's device (graph/compute_device.h): the reduced values land in its memory
// (staged through the host when it is a GPU and the communicator moves host memory) and are added
// up with its kernels.
#pragma once

#include <vector>

#include "hspmd/graph/compute_device.h"
#include "hspmd/resolve/resolver.h"
#include "hspmd/runtime/reshard_exec.h"
#include "hspmd/runtime/training_state.h"

namespace hspmd::runtime {

inline constexpr const char* kGradientChannel = "grad";

// Reduces `summand` (this rank's summand of s's gradient, in s.grad_annotation's layout) into s's
// optimizer-state layout and adds the result to s.grad_shard (allocated at the first call).
void reduce_into_shard(TensorState& s, const Tensor& summand, int rank, resolve::ResolveCache& cache,
                       CommSession& session, const graph::ComputeDevice& compute);

// Post: s's whole synced gradient in its optimizer-state layout. The shard ZeRO-2 accumulated when
// there is one (s.grad is then empty); otherwise s.grad reduced now (zeros when no micro-batch
// reached this rank). Leaves s.grad and s.grad_shard empty.
Tensor take_synced_gradient(TensorState& s, int rank, resolve::ResolveCache& cache, CommSession& session,
                            const graph::ComputeDevice& compute);

// ZeRO-2's micro-batch groups: every rank of the step reduces as many times, so the group count is
// the fewest micro-batches any pipeline runs (at least 1). Returns, for a rank running
// `micro_batches` of them, after how many of its backward passes each group ends (ascending; the
// last is `micro_batches`); empty when it runs none (Post reduces its zeros).
std::vector<int> gradient_group_ends(int micro_batches, int groups);

}  // namespace hspmd::runtime
