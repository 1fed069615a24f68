// The vocabulary-parallel token loss on the GPU against the CPU kernels (kernels/cross_entropy.h,
// kernels/lm_head_loss.h): a row of 301 columns in three shards of odd widths; each shard's row
// statistics and its backward (with the whole row's lse), for the separate and the fused loss, and
// the CUDA registry's cross_entropy entries of a shard with the gather the runtime provides.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/gpu_testlib.h"
#include "hspmd/core/cuda/cuda_tensor_memory.h"
#include "hspmd/graph/cuda/cuda_kernels.h"
#include "hspmd/kernels/cross_entropy.h"
#include "hspmd/kernels/cuda/cross_entropy.h"
#include "hspmd/kernels/cuda/lm_head_loss.h"
#include "hspmd/kernels/lm_head_loss.h"

namespace hspmd::kernels::cuda {
namespace {

using namespace hspmd::testing;

constexpr int64_t kTokens = 29, kVocab = 301;
struct Shard {
  int64_t begin, end;
  int64_t width() const { return end - begin; }
};
const std::vector<Shard> kShards{{0, 97}, {97, 211}, {211, kVocab}};

// The columns [s.begin, s.end) of x [R, C] (row-major float32), as a tensor of their own.
Tensor columns(const Tensor& x, Shard s) {
  const int64_t rows = x.dim(0), cols = x.dim(1);
  Tensor out = Tensor::empty({rows, s.width()}, DType::kFloat32);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(out.data<float>() + r * s.width(), x.data<float>() + r * cols + s.begin, s.width() * sizeof(float));
  }
  return out;
}

// Rows [s.begin, s.end) of w [V, H].
Tensor rows_of(const Tensor& w, Shard s) {
  Tensor out = Tensor::empty({s.width(), w.dim(1)}, DType::kFloat32);
  std::memcpy(out.data<float>(), w.data<float>() + s.begin * w.dim(1), s.width() * w.dim(1) * sizeof(float));
  return out;
}

// Every shard's [3, T] statistics stacked as [k, 3, T], the runtime's all-gather.
Tensor stacked(const std::vector<Tensor>& stats) {
  const int64_t n = stats[0].numel();
  Tensor all = Tensor::empty({static_cast<int64_t>(stats.size()), 3, n / 3}, DType::kFloat64);
  for (size_t i = 0; i < stats.size(); ++i) {
    std::memcpy(all.data<double>() + i * n, stats[i].data<double>(), n * sizeof(double));
  }
  return all;
}

Tensor targets_across_shards() {
  Tensor targets = random_ints({kTokens}, DType::kInt64, 202, 0, kVocab);
  int64_t* t = targets.data<int64_t>();
  t[2] = -100;  // ignored
  t[3] = 0;     // the first and the last column of each shard
  t[4] = 96;
  t[5] = 97;
  t[6] = 210;
  t[7] = 211;
  t[8] = kVocab - 1;
  return targets;
}

CrossEntropyOptions shard_options(Shard s, double softcap) {
  return {.ignore_index = -100, .vocab_start = s.begin, .vocab_size = kVocab, .softcap = softcap};
}

class CudaVocabShardLoss : public GpuTest, public ::testing::WithParamInterface<double> {};

TEST_P(CudaVocabShardLoss, CrossEntropyStatsAndBackwardMatchTheCpu) {
  const double softcap = GetParam();
  const Tensor logits = random_tensor({kTokens, kVocab}, DType::kFloat32, 201, -40.0, 40.0);
  const Tensor targets = targets_across_shards();
  const Tensor dlosses = random_tensor({kTokens}, DType::kFloat32, 203, 0.1, 1.0);
  Tensor losses = Tensor::empty({kTokens}, DType::kFloat32), lse = losses.clone();
  kernels::cross_entropy_fwd(logits, targets, losses, lse, {.ignore_index = -100, .softcap = softcap});

  auto gtargets = upload(targets), glse = upload(lse), gdlosses = upload(dlosses);
  std::vector<Tensor> gpu_stats;
  for (const Shard& s : kShards) {
    SCOPED_TRACE("shard from " + std::to_string(s.begin));
    const Tensor mine = columns(logits, s);
    Tensor stats = Tensor::empty({3, kTokens}, DType::kFloat64);
    kernels::cross_entropy_shard_stats(mine, targets, stats, shard_options(s, softcap));
    Tensor dlogits = Tensor::empty(mine.shape(), DType::kFloat32);
    kernels::cross_entropy_bwd(mine, targets, lse, dlosses, dlogits, shard_options(s, softcap));

    const CrossEntropyShape shape{.tokens = kTokens, .vocab = s.width(), .ignore_index = -100, .softcap = softcap,
                                  .vocab_start = s.begin, .vocab_size = kVocab};
    auto gmine = upload(mine), gstats = device_empty({3, kTokens}, DType::kFloat64);
    auto gdlogits = device_empty(mine.shape(), DType::kFloat32);
    cross_entropy_shard_stats(DType::kFloat32, gmine.data(), DType::kInt64, gtargets.data(), gstats.as<double>(),
                              kTokens, shape, stream_.get());
    cross_entropy_bwd(DType::kFloat32, gmine.data(), DType::kInt64, gtargets.data(), glse.as<float>(),
                      gdlosses.as<float>(), gdlogits.data(), shape, stream_.get());
    gpu_stats.push_back(download(gstats, {3, kTokens}, DType::kFloat64));
    EXPECT_TRUE(all_close(gpu_stats.back(), stats, 1e-5, 1e-6, "stats"));
    EXPECT_TRUE(all_close(download(gdlogits, mine.shape(), DType::kFloat32), dlogits, 1e-4, 1e-6, "dlogits"));
  }
  // The GPU's statistics combine into the whole row's loss.
  Tensor combined_losses = losses.clone(), combined_lse = lse.clone();
  kernels::cross_entropy_combine(stacked(gpu_stats), targets, combined_losses, combined_lse,
                                 {.ignore_index = -100, .softcap = softcap});
  EXPECT_TRUE(all_close(combined_losses, losses, 1e-5, 1e-5, "losses"));
  EXPECT_TRUE(all_close(combined_lse, lse, 1e-5, 1e-5, "lse"));
}

TEST_P(CudaVocabShardLoss, LmHeadStatsAndBackwardMatchTheCpu) {
  const double softcap = GetParam();
  const int64_t hidden = 13;
  const Tensor x = random_tensor({kTokens, hidden}, DType::kFloat32, 211);
  const Tensor w = random_tensor({kVocab, hidden}, DType::kFloat32, 212);
  const Tensor targets = targets_across_shards();
  const Tensor dlosses = random_tensor({kTokens}, DType::kFloat32, 213, 0.1, 1.0);
  const LmHeadLossOptions whole{.loss = {.ignore_index = -100, .softcap = softcap}};
  Tensor all_stats = Tensor::empty({1, 3, kTokens}, DType::kFloat64);
  kernels::lm_head_loss_stats(x, w, targets, all_stats.reshape({3, kTokens}), whole);
  Tensor losses = Tensor::empty({kTokens}, DType::kFloat32), lse = losses.clone();
  kernels::cross_entropy_combine(all_stats, targets, losses, lse, whole.loss);

  auto gx = upload(x), gtargets = upload(targets), glse = upload(lse), gdlosses = upload(dlosses);
  CublasLtGemm gemm(0);
  const LmHeadLossContext ctx{gemm, memory_, stream_.get()};
  for (const Shard& s : kShards) {
    SCOPED_TRACE("shard from " + std::to_string(s.begin));
    const Tensor mine = rows_of(w, s);
    const LmHeadLossOptions o{.loss = shard_options(s, softcap)};
    Tensor stats = Tensor::empty({3, kTokens}, DType::kFloat64);
    kernels::lm_head_loss_stats(x, mine, targets, stats, o);
    Tensor dx = Tensor::empty({kTokens, hidden}, DType::kFloat32), dw = Tensor::empty(mine.shape(), DType::kFloat32);
    kernels::lm_head_loss_bwd(x, mine, targets, lse, dlosses, dx, dw, o);

    // Chunks of 8 rows: the statistics land in the [3, T] block at each chunk's offset.
    const LmHeadLossShape shape{.tokens = kTokens, .hidden = hidden, .vocab = s.width(), .ignore_index = -100,
                                .softcap = softcap, .chunk_rows = 8, .vocab_start = s.begin, .vocab_size = kVocab};
    auto gw = upload(mine), gstats = device_empty({3, kTokens}, DType::kFloat64);
    auto gdx = device_empty({kTokens, hidden}, DType::kFloat32), gdw = device_empty(mine.shape(), DType::kFloat32);
    lm_head_loss_stats(ctx, DType::kFloat32, gx.data(), gw.data(), DType::kInt64, gtargets.data(), gstats.as<double>(),
                       shape);
    lm_head_loss_bwd(ctx, DType::kFloat32, gx.data(), gw.data(), DType::kInt64, gtargets.data(), glse.as<float>(),
                     gdlosses.as<float>(), gdx.as<float>(), gdw.as<float>(), shape);
    EXPECT_TRUE(all_close(download(gstats, {3, kTokens}, DType::kFloat64), stats, 1e-5, 1e-6, "stats"));
    EXPECT_TRUE(all_close(download(gdx, {kTokens, hidden}, DType::kFloat32), dx, 1e-4, 1e-6, "dx"));
    EXPECT_TRUE(all_close(download(gdw, mine.shape(), DType::kFloat32), dw, 1e-4, 1e-6, "dw"));
  }
}

INSTANTIATE_TEST_SUITE_P(Softcap, CudaVocabShardLoss, ::testing::Values(0.0, 30.0),
                         [](const auto& info) { return info.param == 0.0 ? "none" : "capped"; });

// A shard's statistics past the target's validity say so: NaN, as the whole-row kernel's loss.
TEST_F(GpuTest, ShardStatsOfAnOutOfRangeTargetAreNan) {
  const Tensor logits = random_tensor({2, 5}, DType::kFloat32, 221);
  auto glogits = upload(logits), gtargets = upload(Tensor::from_vector<int32_t>({2}, {6, 12}));
  auto gstats = device_empty({3, 2}, DType::kFloat64);
  cross_entropy_shard_stats(DType::kFloat32, glogits.data(), DType::kInt32, gtargets.data(), gstats.as<double>(), 2,
                            {.tokens = 2, .vocab = 5, .ignore_index = -100, .vocab_start = 5, .vocab_size = 12},
                            stream_.get());
  const Tensor stats = download(gstats, {3, 2}, DType::kFloat64);
  EXPECT_DOUBLE_EQ(stats.data<double>()[4], logits.data<float>()[1]);  // target 6: column 1 of this shard
  EXPECT_TRUE(std::isnan(stats.data<double>()[5]));                      // 12: outside the row of 12
}

// The registry's entries of a shard, as the runtime runs them: device tensors, and a gather that
// returns every shard's statistics (here the other shards' come from the CPU kernel).
TEST_F(GpuTest, TheCudaCrossEntropyEntriesOfAShardGatherAndMatchTheCpu) {
  Allocator gpu = hspmd::cuda::make_cuda_allocator({.device = 0, .capacity_bytes = 0, .name = "rank 0"});
  const Tensor logits = random_tensor({kTokens, kVocab}, DType::kFloat32, 231, -8.0, 8.0);
  const Tensor targets = targets_across_shards();
  const Tensor loss_scale = Tensor::full({}, DType::kFloat32, 0.125), dloss = Tensor::full({}, DType::kFloat32, 2.0);
  Tensor losses = Tensor::empty({kTokens}, DType::kFloat32), lse = losses.clone();
  kernels::cross_entropy_fwd(logits, targets, losses, lse);
  double expected_loss = 0;
  for (int64_t t = 0; t < kTokens; ++t) expected_loss += 0.125 * losses.data<float>()[t];

  const graph::KernelRegistry& cuda = graph::cuda_kernels();
  for (size_t i = 0; i < kShards.size(); ++i) {
    const Shard& s = kShards[i];
    SCOPED_TRACE("shard from " + std::to_string(s.begin));
    const Tensor mine = columns(logits, s);
    graph::Op op{.kind = graph::OpKind::kCrossEntropy, .name = "head.loss", .inputs = {},
                 .outputs = {{{}, DType::kFloat32}, {{}, DType::kFloat32}}, .attrs = {}};
    op.attrs.ignore_index = -100;
    op.attrs.vocab_start = s.begin;
    op.attrs.vocab_size = kVocab;
    const std::vector<Tensor> inputs{mine.clone(&gpu), targets.clone(&gpu), loss_scale.clone(&gpu)};
    const std::vector<Shape> shapes{Shape{}, Shape{kTokens}};
    graph::KernelContext fwd{op, inputs, shapes, &gpu, {}, {}};
    fwd.gather_vocab_shards = [&](const Tensor& gathered_mine) {
      std::vector<Tensor> all;
      for (size_t j = 0; j < kShards.size(); ++j) {
        if (j == i) {
          all.push_back(gathered_mine.to_host());
          continue;
        }
        Tensor theirs = Tensor::empty({3, kTokens}, DType::kFloat64);
        kernels::cross_entropy_shard_stats(columns(logits, kShards[j]), targets, theirs,
                                           shard_options(kShards[j], 0.0));
        all.push_back(theirs);
      }
      return stacked(all);
    };
    cuda.get(op, DeviceType::kCUDA)(fwd);
    ASSERT_EQ(fwd.outputs.size(), 2u);
    EXPECT_NEAR(fwd.outputs[0].to_host().element_as_double(0), expected_loss, 1e-5 * expected_loss);
    EXPECT_TRUE(all_close(fwd.outputs[1].to_host(), lse, 1e-5, 1e-5, "lse"));

    graph::Op bwd_op = op;
    bwd_op.kind = graph::OpKind::kCrossEntropyBwd;
    bwd_op.outputs = {{{}, DType::kFloat32}};
    const std::vector<Tensor> bwd_inputs{inputs[0], inputs[1], fwd.outputs[1], inputs[2], dloss.clone(&gpu)};
    const std::vector<Shape> bwd_shapes{mine.shape()};
    graph::KernelContext bwd{bwd_op, bwd_inputs, bwd_shapes, &gpu, {}, {}};
    cuda.get(bwd_op, DeviceType::kCUDA)(bwd);
    Tensor dlogits = Tensor::empty(mine.shape(), DType::kFloat32);
    kernels::cross_entropy_bwd(mine, targets, lse, Tensor::full({kTokens}, DType::kFloat32, 0.25), dlogits,
                               shard_options(s, 0.0));
    EXPECT_TRUE(all_close(bwd.outputs.at(0).to_host(), dlogits, 1e-4, 1e-6, "dlogits"));
  }
}

}  // namespace
}  // namespace hspmd::kernels::cuda
