#include "hspmd/runtime/bucketed_gradient_sync.h"

#include <algorithm>
#include <string>
#include <utility>

#include "hspmd/core/error.h"
#include "hspmd/kernels/threading.h"
#include "hspmd/runtime/fault_injection.h"
#include "hspmd/runtime/gradient_sync.h"

namespace hspmd::runtime {

std::vector<std::vector<size_t>> gradient_buckets(const std::vector<int64_t>& bytes, int64_t bucket_bytes) {
  HSPMD_CHECK(bucket_bytes >= 0) << "gradient bucket size " << bucket_bytes << " bytes: must be >= 0";
  std::vector<std::vector<size_t>> buckets;
  int64_t filled = 0;
  for (size_t k = bytes.size(); k-- > 0;) {
    if (buckets.empty() || filled + bytes[k] > bucket_bytes) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(k);
    filled += bytes[k];
  }
  return buckets;
}

BucketedGradientSync::BucketedGradientSync(int rank, int64_t bucket_bytes, bool on_thread, GradientSyncParts parts)
    : rank_(rank),
      bucket_bytes_(bucket_bytes),
      parts_(parts),
      thread_("rank " + std::to_string(rank) + " (gradient sync)", /*threaded=*/on_thread && bucket_bytes > 0) {}

void BucketedGradientSync::start(ShardedState& state, int64_t step) {
  state_ = &state;
  step_ = step;
  kernel_threads_ = kernels::num_threads();
  std::vector<int64_t> bytes;
  for (const TensorState& s : state.tensors) {
    // Gradients are float32 whatever the compute precision (docs/mixed-precision.md).
    bytes.push_back(s.grad_annotation.region(rank_, s.shape)->shape().numel() * int64_t{4});
  }
  buckets_ = gradient_buckets(bytes, bucket_bytes_);
  synced_.assign(state.tensors.size(), Tensor());
  into_shards_ = false;
  synced_round_ = false;
  next_bucket_ = 0;
  produced_buckets_ = 0;
}

void BucketedGradientSync::begin_round(bool into_shards) {
  HSPMD_ASSERT(state_ != nullptr) << "rank " << rank_ << ": a gradient round outside a training step";
  into_shards_ = into_shards;
  synced_round_ = !into_shards;
  done_.assign(state_->tensors.size(), false);
  next_bucket_ = 0;
}

void BucketedGradientSync::gradient_done(size_t i) {
  done_.at(i) = true;
  bool padded = false;
  while (next_bucket_ < buckets_.size() &&
         std::all_of(buckets_[next_bucket_].begin(), buckets_[next_bucket_].end(), [&](size_t k) { return done_[k]; })) {
    if (!padded) {  // the backward so far, stretched: the bucket leaves when the emulated device has it
      parts_.pacer.pad();
      padded = true;
    }
    hand_over(next_bucket_++);
  }
}

void BucketedGradientSync::hand_over(size_t bucket) {
  ShardedState& state = *state_;
  const int threads = kernel_threads_;
  if (into_shards_) {
    // The group's gradients leave the state now: the next group sums into new ones meanwhile.
    std::vector<std::pair<TensorState*, Tensor>> group;
    for (size_t i : buckets_[bucket]) {
      TensorState& s = state.tensors[i];
      group.emplace_back(&s, std::move(s.grad));
      s.grad = Tensor();
    }
    reduce_into_shards(std::move(group), "grad-shards" + std::to_string(bucket));
    return;
  }
  thread_.submit([this, bucket, threads, &state] {
    kernels::ScopedNumThreads scoped(threads);
    const double start = parts_.tracer.now_us();
    for (size_t i : buckets_[bucket]) {
      synced_[i] =
          take_synced_gradient(state.tensors[i], rank_, parts_.resolutions, parts_.session, parts_.compute);
      fault_point(rank_, step_, "grad-sync");
    }
    parts_.tracer.record("grad-bucket" + std::to_string(bucket), "comm", start, parts_.tracer.now_us());
  });
}

uint64_t BucketedGradientSync::reduce_into_shards(std::vector<std::pair<TensorState*, Tensor>> bucket,
                                                  const std::string& name) {
  return thread_.submit([this, name, threads = kernel_threads_, bucket = std::move(bucket)]() mutable {
    kernels::ScopedNumThreads scoped(threads);
    const double start = parts_.tracer.now_us();
    for (auto& [s, grad] : bucket) {
      reduce_into_shard(*s, grad, rank_, parts_.resolutions, parts_.session, parts_.compute);
      grad = Tensor();  // each whole gradient freed as soon as it is reduced
    }
    parts_.tracer.record(name, "comm", start, parts_.tracer.now_us());
  });
}

void BucketedGradientSync::gradients_produced(std::vector<std::pair<size_t, Tensor>> grads) {
  HSPMD_ASSERT(state_ != nullptr && into_shards_) << "rank " << rank_ << ": gradients outside a ZeRO-3 round";
  parts_.pacer.pad();  // B so far, stretched: the bucket leaves when the emulated device has it
  // At most one bucket in flight: B computed this one while the thread reduced the one before.
  thread_.wait_for(in_flight_);
  std::vector<std::pair<TensorState*, Tensor>> bucket;
  for (auto& [i, grad] : grads) bucket.emplace_back(&state_->tensors.at(i), std::move(grad));
  in_flight_ = reduce_into_shards(std::move(bucket), "grad-shards" + std::to_string(produced_buckets_++));
}

uint64_t BucketedGradientSync::submit_after_gradients(std::function<void()> job) {
  parts_.pacer.pad();
  return thread_.submit([job = std::move(job), threads = kernels::num_threads()] {
    kernels::ScopedNumThreads scoped(threads);
    job();
  });
}

void BucketedGradientSync::end_round() {
  if (into_shards_) thread_.wait();
}

std::vector<Tensor> BucketedGradientSync::finish() {
  HSPMD_ASSERT(state_ != nullptr) << "rank " << rank_ << ": gradient sync outside a training step";
  if (!synced_round_) begin_round(/*into_shards=*/false);  // from the first bucket
  while (next_bucket_ < buckets_.size()) hand_over(next_bucket_++);
  thread_.wait();
  state_ = nullptr;
  return std::move(synced_);
}

void BucketedGradientSync::abandon() {
  thread_.abandon();
  state_ = nullptr;
}

}  // namespace hspmd::runtime
