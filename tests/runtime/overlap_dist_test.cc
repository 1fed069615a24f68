// Gradient buckets overlapped with the backward pass (runtime/bucketed_gradient_sync.h): for DP,
// DP x TP, DP x PP, DP x CP, sequence parallelism, ZeRO-1, ZeRO-2, ZeRO-3 (its gathers too, with
// recompute, 1F1B and pipelines of other shapes), heterogeneous pipelines and a run switching between
// them, every step's loss and gradient norm and the final weights with small buckets reduced on the
// communication thread equal, bit for bit, those of the sync after the backward pass (grad_bucket_mb
// 0), and an overlapped run equals the single-process run. Buckets are formed as configured, ZeRO-3's
// gathers and reductions run on the thread (its trace spans), and a communication failure on the
// thread surfaces on the main thread as an error naming it. Ranks run as threads of this process over
// Gloo (runtime/dist_run_testlib.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "hspmd/comm/thread_ranks.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/models/llama.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/runtime/bucketed_gradient_sync.h"
#include "hspmd/runtime/dist_trainer.h"
#include "runtime/dist_run_testlib.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

using ::testing::HasSubstr;
using testing::dist_options;
using testing::DistRun;
using testing::expect_matches_single_process;
using testing::run;
using testing::run_phases;
using testing::RunOptions;
using testing::strategy;
using testing::with_zero;

constexpr int64_t kSteps = 3;
// MiB per bucket: a few of the test model's tensors each, so every rank hands over several buckets
// while its backward pass goes on.
constexpr double kSmallBuckets = 0.004;

// Two micro-batches per pipeline, so gradients are summed before the last backward pass finishes them
// (and ZeRO-2 reduces two groups).
const char* kDp2 = R"([
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-3"}]},
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "1", "layers": "0-3"}]}])";
const char* kDp2Tp2 = R"([
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2-3", "layers": "0-3"}]}])";
const char* kDp2Pp2 = R"([
  {"micro_batch_size": 1, "num_micro_batches": 2,
   "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "1", "layers": "2-3"}]},
  {"micro_batch_size": 1, "num_micro_batches": 2,
   "stages": [{"ranks": "2", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}])";
// TP 2 with 3 micro-batches next to a 2-stage pipeline with 2 of another size (SplitRS / BSR syncs).
const char* kHetero = R"([
  {"micro_batch_size": 1, "num_micro_batches": 3, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
  {"micro_batch_size": 2, "num_micro_batches": 2,
   "stages": [{"ranks": "2", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}])";

// CP 2, and CP 2 x TP 2: a parameter's gradient is partial over the CP ranks of its pipeline too.
const char* kDp2Cp2 = R"([
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3", "cp": 2}]},
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2-5", "layers": "0-3", "tp": 2, "cp": 2}]}])";
// Sequence parallelism on TP 2 pipelines: the norms' gradients are partial over the TP ranks.
const char* kDp2Tp2Sp = R"([
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3", "sequence_parallel": true}]},
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "2-3", "layers": "0-3", "sequence_parallel": true}]}])";
// ZeRO-3 (as in zero3_dist_test.cc): two TP 2 x PP 2 pipelines; a 1-stage TP 2 pipeline beside a
// 2-stage TP 1 one of uneven stages and larger micro-batches; 1F1B over pipelines of 2, 2 and 3
// stages whose holders of a layer run their passes in one order.
const char* kDp2Tp2Pp2 = R"([
  {"micro_batch_size": 1, "num_micro_batches": 2,
   "stages": [{"ranks": "0-1", "layers": "0-1"}, {"ranks": "2-3", "layers": "2-3"}]},
  {"micro_batch_size": 1, "num_micro_batches": 2,
   "stages": [{"ranks": "4-5", "layers": "0-1"}, {"ranks": "6-7", "layers": "2-3"}]}])";
const char* kZero3Hetero = R"([
  {"micro_batch_size": 1, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
  {"micro_batch_size": 2, "num_micro_batches": 2,
   "stages": [{"ranks": "2", "layers": "0"}, {"ranks": "3", "layers": "1-3"}]}])";
const char* kZero3Hetero1F1B = R"([
  {"micro_batch_size": 1, "num_micro_batches": 2,
   "stages": [{"ranks": "0-1", "layers": "0-1"}, {"ranks": "2-3", "layers": "2-3"}]},
  {"micro_batch_size": 1, "num_micro_batches": 2,
   "stages": [{"ranks": "4", "layers": "0"}, {"ranks": "5", "layers": "1"}, {"ranks": "6", "layers": "2-3"}]}])";

RunOptions buckets(double mib) {
  return {.configure = [mib](int, DistOptions& d) { d.grad_bucket_mb = mib; }};
}

// Overlapped against the sync after the backward pass: the same reductions of the same sums, so the
// same bits.
void expect_same_bits(const DistRun& overlapped, const DistRun& after) {
  EXPECT_EQ(overlapped.losses, after.losses);
  EXPECT_EQ(overlapped.grad_norms, after.grad_norms);
  ASSERT_EQ(overlapped.weights.size(), after.weights.size());
  for (const auto& [name, w] : after.weights) {
    const Tensor& o = overlapped.weights.at(name);
    ASSERT_EQ(o.numel(), w.numel()) << name;
    int64_t differing = 0;
    for (int64_t i = 0; i < w.numel(); ++i) differing += o.data<float>()[i] != w.data<float>()[i];
    EXPECT_EQ(differing, 0) << name;
  }
}

void expect_overlap_changes_nothing(const sharding::Strategy& st, RunOptions options = {}) {
  RunOptions after = options;
  after.configure = buckets(0).configure;
  options.configure = buckets(kSmallBuckets).configure;
  expect_same_bits(run(st, dist_options(kSteps), options), run(st, dist_options(kSteps), after));
}

TEST(Overlap, DataParallelEqualsSyncAfterBackward) { expect_overlap_changes_nothing(with_zero(0, kDp2)); }
TEST(Overlap, DataTimesTensorParallelEqualsSyncAfterBackward) {
  expect_overlap_changes_nothing(with_zero(0, kDp2Tp2));
}
TEST(Overlap, DataTimesPipelineParallelEqualsSyncAfterBackward) {
  expect_overlap_changes_nothing(with_zero(0, kDp2Pp2));
}
TEST(Overlap, Zero1EqualsSyncAfterBackward) { expect_overlap_changes_nothing(with_zero(1, kDp2)); }
TEST(Overlap, Zero2EqualsSyncAfterBackward) { expect_overlap_changes_nothing(with_zero(2, kDp2Tp2)); }
TEST(Overlap, HeterogeneousPipelinesEqualSyncAfterBackward) {
  expect_overlap_changes_nothing(with_zero(0, kHetero));
  expect_overlap_changes_nothing(with_zero(1, kHetero));
  expect_overlap_changes_nothing(with_zero(2, kHetero));
}

// ZeRO-3: the per-layer gathers of F, B and B's recompute run on the communication thread one layer
// ahead, the gradients reduced into the shards there in the order B produces them.
TEST(Overlap, Zero3EqualsSyncAfterBackwardAndOneProcess) {
  expect_overlap_changes_nothing(with_zero(3, kDp2));
  expect_overlap_changes_nothing(with_zero(3, kDp2Pp2));
  expect_matches_single_process(run(with_zero(3, kDp2Tp2), dist_options(kSteps), buckets(kSmallBuckets)), kSteps);
}

TEST(Overlap, Zero3DataTensorPipelineParallelWithRecomputeEqualsSyncAfterBackwardAndOneProcess) {
  expect_overlap_changes_nothing(with_zero(3, kDp2Tp2Pp2, /*recompute=*/true));
  expect_matches_single_process(
      run(with_zero(3, kDp2Tp2Pp2, /*recompute=*/true), dist_options(kSteps), buckets(kSmallBuckets)), kSteps);
}

TEST(Overlap, Zero3HeterogeneousPipelinesEqualSyncAfterBackwardAndOneProcess) {
  // GPipe over pipelines of other stage splits and TP degrees (SplitAG / BSR gathers), and 1F1B over
  // three pipelines whose holders of each layer run their passes in one order.
  expect_overlap_changes_nothing(with_zero(3, kZero3Hetero), {.schedule = specialize::ScheduleKind::kGPipe});
  expect_overlap_changes_nothing(with_zero(3, kZero3Hetero1F1B));
  RunOptions gpipe = buckets(kSmallBuckets);
  gpipe.schedule = specialize::ScheduleKind::kGPipe;
  expect_matches_single_process(run(with_zero(3, kZero3Hetero), dist_options(kSteps), gpipe), kSteps);
  expect_matches_single_process(run(with_zero(3, kZero3Hetero1F1B), dist_options(kSteps), buckets(kSmallBuckets)),
                                kSteps);
}

// The trace names each span's thread: with overlap every gather and ZeRO-3 gradient bucket is on
// another thread than F and B; without it, on theirs (so the test can tell them apart).
TEST(Overlap, Zero3GathersAndReductionsRunOnTheCommunicationThread) {
  for (const double mib : {kSmallBuckets, 0.0}) {
    std::vector<std::vector<TraceEvent>> events(2);
    RunOptions ro;
    ro.configure = [mib](int, DistOptions& d) {
      d.grad_bucket_mb = mib;
      d.trace = true;
    };
    ro.after = [&](DistTrainer& t) { events[t.rank()] = t.tracer().events(); };
    run(with_zero(3, kDp2), dist_options(1), ro);
    for (int rank = 0; rank < 2; ++rank) {
      std::set<int> compute, gathers, reductions;
      for (const TraceEvent& e : events[rank]) {
        if (e.name == "F0" || e.name == "B0") compute.insert(e.tid);
        if (e.name.ends_with(".gather")) gathers.insert(e.tid);
        if (e.name.starts_with("grad-shards")) reductions.insert(e.tid);
      }
      ASSERT_EQ(compute.size(), 1u) << "rank " << rank;
      ASSERT_FALSE(gathers.empty()) << "rank " << rank;
      ASSERT_FALSE(reductions.empty()) << "rank " << rank;
      const bool on_compute_thread = mib == 0;
      EXPECT_EQ(gathers.count(*compute.begin()) == 1, on_compute_thread) << "rank " << rank << ", " << mib;
      EXPECT_EQ(gathers.size(), 1u) << "rank " << rank << ", " << mib;
      EXPECT_EQ(reductions, gathers) << "rank " << rank << ", " << mib;  // one thread, one order
    }
  }
}

TEST(Overlap, OverlappedRunsEqualOneProcess) {
  expect_matches_single_process(run(with_zero(1, kDp2Pp2), dist_options(kSteps), buckets(kSmallBuckets)), kSteps);
  expect_matches_single_process(run(with_zero(2, kHetero), dist_options(kSteps), buckets(kSmallBuckets)), kSteps);
}

TEST(Overlap, ContextParallelEqualsSyncAfterBackwardAndOneProcess) {
  expect_overlap_changes_nothing(with_zero(0, kDp2Cp2));
  expect_overlap_changes_nothing(with_zero(2, kDp2Cp2));
  expect_matches_single_process(run(with_zero(1, kDp2Cp2), dist_options(kSteps), buckets(kSmallBuckets)), kSteps);
  expect_matches_single_process(run(with_zero(3, kDp2Cp2), dist_options(kSteps), buckets(kSmallBuckets)), kSteps);
}

TEST(Overlap, SequenceParallelEqualsSyncAfterBackwardAndOneProcess) {
  expect_overlap_changes_nothing(with_zero(0, kDp2Tp2Sp));
  expect_overlap_changes_nothing(with_zero(2, kDp2Tp2Sp));
  expect_matches_single_process(run(with_zero(1, kDp2Tp2Sp), dist_options(kSteps), buckets(kSmallBuckets)), kSteps);
}

// Each plan has its own buckets (other parameters per rank, other syncs): a run switching between
// ZeRO stages and pipeline shapes reduces each step's buckets under the plan of that step.
TEST(Overlap, SwitchedRunEqualsSyncAfterBackwardAndOneProcess) {
  const std::vector<testing::Phase> phases{
      {1, with_zero(2, kDp2)}, {2, with_zero(0, kDp2Pp2)}, {3, with_zero(1, kHetero)}, {4, with_zero(2, kDp2Tp2Sp)}};
  const DistRun overlapped = run_phases(phases, dist_options(4), buckets(kSmallBuckets));
  for (size_t rank = 0; rank < overlapped.switches.size(); ++rank) {
    ASSERT_EQ(overlapped.switches[rank].size(), 3u) << rank;
  }
  expect_same_bits(overlapped, run_phases(phases, dist_options(4), buckets(0)));
  expect_matches_single_process(overlapped, 4);
}

TEST(GradientBuckets, ConsecutiveInReverseOrderUpToTheSize) {
  // Reverse order: 5 (10 bytes), then 4 (200, over the size: alone), 3 + 2 + 1 (exactly 100), 0.
  const std::vector<int64_t> bytes{100, 50, 30, 20, 200, 10};
  EXPECT_EQ(gradient_buckets(bytes, 100), (std::vector<std::vector<size_t>>{{5}, {4}, {3, 2, 1}, {0}}));
  EXPECT_EQ(gradient_buckets(bytes, 1000), (std::vector<std::vector<size_t>>{{5, 4, 3, 2, 1, 0}}));
  EXPECT_EQ(gradient_buckets(bytes, 0), (std::vector<std::vector<size_t>>{{5}, {4}, {3}, {2}, {1}, {0}}));
  EXPECT_TRUE(gradient_buckets({}, 100).empty());
  EXPECT_THROW(gradient_buckets(bytes, -1), Error);
}

TEST(GradientBuckets, TrainerFormsThemFromTheConfiguredSize) {
  // Per rank of DP 2: the bucket count for 0 (one per tensor), a small size and 25 MiB (the whole
  // test model in one), each bucket a run of the rank's tensors in reverse model order.
  for (const double mib : {0.0, kSmallBuckets, 25.0}) {
    std::vector<size_t> counts(2), tensors(2);
    RunOptions ro = buckets(mib);
    ro.after = [&](DistTrainer& t) {
      std::vector<size_t> order;
      for (const std::vector<size_t>& b : t.gradient_buckets()) order.insert(order.end(), b.begin(), b.end());
      std::vector<size_t> reversed(order.size());
      std::iota(reversed.rbegin(), reversed.rend(), size_t{0});
      EXPECT_EQ(order, reversed) << "rank " << t.rank() << ", " << mib << " MiB";
      counts[t.rank()] = t.gradient_buckets().size();
      tensors[t.rank()] = order.size();
    };
    run(with_zero(0, kDp2), dist_options(1), ro);
    for (int rank = 0; rank < 2; ++rank) {
      if (mib == 0) {
        EXPECT_EQ(counts[rank], tensors[rank]);
      } else if (mib == kSmallBuckets) {
        EXPECT_GT(counts[rank], 2u) << "rank " << rank;
        EXPECT_LT(counts[rank], tensors[rank]) << "rank " << rank;
      } else {
        EXPECT_EQ(counts[rank], 1u);
      }
    }
  }
}

// Two DP ranks with small buckets and a 2 s timeout: rank 1 builds its trainer but never steps;
// what rank 0's first step throws ("" when it does not).
std::string rank0_error_while_rank1_never_steps(const sharding::Strategy& st) {
  const sharding::AnnotationPlan plan = models::compile_llama_plan(testing::dist_config(), st);
  const data::TokenDataset ds = data::TokenDataset::open(testing::corpus_dataset());
  std::atomic<bool> rank0_done{false};
  std::string error;
  comm::run_thread_ranks(
      2,
      [&](int rank, comm::GroupCache& groups) {
        DistOptions o;
        o.train = dist_options(1);
        o.grad_bucket_mb = kSmallBuckets;
        DistTrainer t(models::llama(testing::dist_config()), ds, plan, o, rank, 2, groups);
        if (rank == 1) {
          while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(20));
          return;
        }
        try {
          t.step();
        } catch (const Error& e) {
          error = e.what();
        }
        rank0_done = true;
      },
      comm::Millis(2'000));
  return error;
}

TEST(Overlap, ACommunicationTimeoutOnTheThreadSurfacesOnTheMainThread) {
  // Rank 1 never steps: rank 0's backward pass completes (DP has no pipeline traffic), its
  // communication thread waits for rank 1 in the first bucket's reduction until the 2 s timeout, and
  // step() throws that, naming the thread, instead of hanging.
  const std::string error = rank0_error_while_rank1_never_steps(with_zero(0, kDp2));
  EXPECT_THAT(error, HasSubstr("rank 0 (gradient sync): the communication thread failed"));
}

TEST(Overlap, AZero3GatherTimingOutOnTheThreadSurfacesOnTheMainThread) {
  // Rank 1 never steps: rank 0's first F hands the embedding's gather to its thread, which waits for
  // rank 1 until the 2 s timeout; F, waiting for that layer, throws it instead of hanging.
  const std::string error = rank0_error_while_rank1_never_steps(with_zero(3, kDp2));
  EXPECT_THAT(error, HasSubstr("rank 0 (gradient sync): the communication thread failed"));
  EXPECT_THAT(error, HasSubstr("allgather"));  // the gather, not a reduction
}

}  // namespace
}  // namespace hspmd::runtime
