// The CUDA context-parallel attention against the CPU kernel (kernels/context_attention.h), forward
// and backward: a packed batch of documents of 5, 1 and 140 tokens split over two CP ranks in the
// load-balanced (zigzag) order, each rank's query rows against every key in the gathered (rank)
// order, grouped-query heads, float32 and bfloat16, int64 and int32 indices, without and with a
// sliding window; and the packed order, which must compute exactly what plain attention does.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "gpu/gpu_testlib.h"
#include "hspmd/kernels/context_attention.h"
#include "hspmd/kernels/cuda/attention.h"

namespace hspmd::kernels::cuda {
namespace {

using namespace hspmd::testing;

constexpr int64_t kTokens = 146, kQHeads = 4, kKvHeads = 2, kHeadDim = 24;

// Two CP ranks, the batch cut in 4 chunks: rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
std::vector<int64_t> positions_of(int rank) {
  const int64_t chunk = (kTokens + 3) / 4;
  std::vector<int64_t> out;
  for (int c : {rank, 3 - rank}) {
    for (int64_t p = c * chunk; p < std::min(kTokens, (c + 1) * chunk); ++p) out.push_back(p);
  }
  return out;
}

Tensor index_tensor(const std::vector<int64_t>& values, DType dtype) {
  Tensor t = Tensor::from_vector<int64_t>({static_cast<int64_t>(values.size())}, values);
  if (dtype == DType::kInt64) return t;
  std::vector<int32_t> narrow(values.begin(), values.end());
  return Tensor::from_vector<int32_t>({static_cast<int64_t>(values.size())}, narrow);
}

class CudaContextAttention : public GpuTest, public ::testing::WithParamInterface<std::tuple<DType, DType>> {};

TEST_P(CudaContextAttention, EachCpRankMatchesTheCpu) {
  const auto [dtype, index_dtype] = GetParam();
  const bool bf16 = dtype == DType::kBFloat16;
  auto rounded = [&](Tensor t) { return bf16 ? to_f32(to_bf16(t)) : t; };
  const Tensor cu = Tensor::from_vector<int64_t>({4}, {0, 5, 6, kTokens});
  // Keys gathered in rank order: rank 0's positions, then rank 1's.
  std::vector<int64_t> kv_positions = positions_of(0);
  for (int64_t p : positions_of(1)) kv_positions.push_back(p);
  const Tensor k = rounded(random_tensor({kTokens, kKvHeads, kHeadDim}, DType::kFloat32, 301));
  const Tensor v = rounded(random_tensor({kTokens, kKvHeads, kHeadDim}, DType::kFloat32, 302));
  const Tensor kv_index = index_tensor(kv_positions, index_dtype);
  auto in = [&](const Tensor& t) { return upload(bf16 ? to_bf16(t) : t); };
  auto gk = in(k), gv = in(v), gcu = upload(cu), gkv_index = upload(kv_index);
  auto gkv_row = device_empty({kTokens}, DType::kInt64);
  for (int rank : {0, 1}) {
    const std::vector<int64_t> mine = positions_of(rank);
    const int64_t tq = static_cast<int64_t>(mine.size());
    const Tensor q = rounded(random_tensor({tq, kQHeads, kHeadDim}, DType::kFloat32, 303 + rank));
    const Tensor dout = rounded(random_tensor({tq, kQHeads, kHeadDim}, DType::kFloat32, 305 + rank));
    const Tensor q_index = index_tensor(mine, index_dtype);
    for (int64_t window : {0, 37}) {
      SCOPED_TRACE("rank " + std::to_string(rank) + ", window " + std::to_string(window));
      Tensor out = Tensor::empty(q.shape(), DType::kFloat32), lse = Tensor::empty({kQHeads, tq}, DType::kFloat32);
      Tensor dq = Tensor::empty(q.shape(), DType::kFloat32), dk = Tensor::empty(k.shape(), DType::kFloat32),
             dv = Tensor::empty(v.shape(), DType::kFloat32);
      kernels::context_attention_fwd(q, k, v, cu, q_index, kv_index, out, lse, {.window = window});
      kernels::context_attention_bwd(q, k, v, cu, q_index, kv_index, out, lse, dout, dq, dk, dv, {.window = window});

      auto gq = in(q), gdout = in(dout), gq_index = upload(q_index);
      auto gout = device_empty(q.shape(), dtype), glse = device_empty({kQHeads, tq}, DType::kFloat32);
      auto gdq = device_empty(q.shape(), DType::kFloat32), gdk = device_empty(k.shape(), DType::kFloat32),
           gdv = device_empty(v.shape(), DType::kFloat32);
      const AttentionShape shape{.tokens = tq, .q_heads = kQHeads, .kv_heads = kKvHeads, .head_dim = kHeadDim,
                                 .sequences = 3, .scale = 0.0, .window = window};
      const ContextRows rows{.index_dtype = index_dtype, .q_index = gq_index.data(), .kv_index = gkv_index.data(),
                             .keys = kTokens, .kv_row = gkv_row.as<int64_t>()};
      context_attention_fwd(dtype, gq.data(), gk.data(), gv.data(), DType::kInt64, gcu.data(), rows, gout.data(),
                            glse.as<float>(), shape, stream_.get());
      context_attention_bwd(dtype, gq.data(), gk.data(), gv.data(), DType::kInt64, gcu.data(), rows, gout.data(),
                            glse.as<float>(), gdout.data(), gdq.as<float>(), gdk.as<float>(), gdv.as<float>(), shape,
                            stream_.get());
      const double rtol = bf16 ? kBFloat16Rtol : 1e-5, atol = bf16 ? kBFloat16Atol : 1e-5;
      EXPECT_TRUE(all_close(to_f32(download(gout, q.shape(), dtype)), out, rtol, atol, "out"));
      EXPECT_TRUE(all_close(download(glse, {kQHeads, tq}, DType::kFloat32), lse, 1e-5, 1e-5, "lse"));
      // The backward's inputs are the GPU's own out and lse; its sums run in another order.
      const double grad_rtol = bf16 ? 3e-2 : 1e-4, grad_atol = bf16 ? 3e-2 : 1e-5;
      EXPECT_TRUE(all_close(download(gdq, q.shape(), DType::kFloat32), dq, grad_rtol, grad_atol, "dq"));
      EXPECT_TRUE(all_close(download(gdk, k.shape(), DType::kFloat32), dk, grad_rtol, grad_atol, "dk"));
      EXPECT_TRUE(all_close(download(gdv, v.shape(), DType::kFloat32), dv, grad_rtol, grad_atol, "dv"));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaContextAttention,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::Values(DType::kInt64, DType::kInt32)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  std::string(dtype_name(std::get<1>(info.param)));
                         });

// Without context parallelism (both indices 0..T-1) the kernel is the reference attention: the
// same operations in the same order, so the forward is bitwise that of reference_attention_fwd.
TEST_F(GpuTest, ThePackedOrderIsExactlyPlainAttention) {
  const Tensor cu = Tensor::from_vector<int32_t>({4}, {0, 5, 6, kTokens});
  std::vector<int64_t> identity(kTokens);
  std::iota(identity.begin(), identity.end(), 0);
  const Tensor q = random_tensor({kTokens, kQHeads, kHeadDim}, DType::kFloat32, 311);
  const Tensor k = random_tensor({kTokens, kKvHeads, kHeadDim}, DType::kFloat32, 312);
  const Tensor v = random_tensor({kTokens, kKvHeads, kHeadDim}, DType::kFloat32, 313);
  auto gq = upload(q), gk = upload(k), gv = upload(v), gcu = upload(cu);
  auto gindex = upload(index_tensor(identity, DType::kInt64)), gkv_row = device_empty({kTokens}, DType::kInt64);
  auto plain_out = device_empty(q.shape(), DType::kFloat32), plain_lse = device_empty({kQHeads, kTokens}, DType::kFloat32);
  auto cp_out = device_empty(q.shape(), DType::kFloat32), cp_lse = device_empty({kQHeads, kTokens}, DType::kFloat32);
  const AttentionShape shape{.tokens = kTokens, .q_heads = kQHeads, .kv_heads = kKvHeads, .head_dim = kHeadDim,
                             .sequences = 3, .scale = 0.0, .window = 0};
  reference_attention_fwd(DType::kFloat32, gq.data(), gk.data(), gv.data(), DType::kInt32, gcu.data(),
                          plain_out.data(), plain_lse.as<float>(), shape, stream_.get());
  context_attention_fwd(DType::kFloat32, gq.data(), gk.data(), gv.data(), DType::kInt32, gcu.data(),
                        {.index_dtype = DType::kInt64, .q_index = gindex.data(), .kv_index = gindex.data(),
                         .keys = kTokens, .kv_row = gkv_row.as<int64_t>()},
                        cp_out.data(), cp_lse.as<float>(), shape, stream_.get());
  EXPECT_TRUE(all_close(download(cp_out, q.shape(), DType::kFloat32), download(plain_out, q.shape(), DType::kFloat32),
                        0, 0, "out"));
  EXPECT_TRUE(all_close(download(cp_lse, {kQHeads, kTokens}, DType::kFloat32),
                        download(plain_lse, {kQHeads, kTokens}, DType::kFloat32), 0, 0, "lse"));
}

}  // namespace
}  // namespace hspmd::kernels::cuda
