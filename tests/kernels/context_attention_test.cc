// context_attention_fwd/bwd (the pieces of context-parallel attention) against the single-rank
// attention_fwd/bwd on the same packed batch: every rank of an emulated CP group gets its zigzag
// query rows and the whole batch's k/v in the group's fed order; its out, lse and dq must equal the
// single-rank rows, and the sum of the ranks' dk, dv the single-rank dk, dv. Documents of different
// lengths cross the 2C chunk boundaries and the 64-token CPU tiles. Also: the identity indices are
// plain attention bitwise, and bad indices are refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "hspmd/kernels/attention.h"
#include "hspmd/kernels/context_attention.h"
#include "kernel_testlib.h"

namespace hspmd::kernels {
namespace {

using hspmd::testing::all_close;
using hspmd::testing::random_tensor;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// The zigzag order of rows of the given lengths (each a multiple of 2C): rank c's chunks c and
// 2C-1-c of every row, rank after rank (data/context_parallel.h builds the same for real batches).
std::vector<int64_t> zigzag_order(const std::vector<int64_t>& rows, int cp) {
  std::vector<int64_t> order;
  for (int c = 0; c < cp; ++c) {
    int64_t start = 0;
    for (int64_t len : rows) {
      const int64_t chunk = len / (2 * cp);
      for (int64_t part : {int64_t{c}, int64_t{2 * cp - 1 - c}}) {
        for (int64_t i = 0; i < chunk; ++i) order.push_back(start + part * chunk + i);
      }
      start += len;
    }
  }
  return order;
}

// Rows index[0], index[1], ... of t [T, ...].
Tensor take_rows(const Tensor& t, const std::vector<int64_t>& index) {
  std::vector<int64_t> dims = t.shape().dims();
  const int64_t row = t.numel() / dims[0];
  dims[0] = static_cast<int64_t>(index.size());
  Tensor out = Tensor::empty(Shape(dims), t.dtype());
  const size_t bytes = static_cast<size_t>(row) * dtype_size(t.dtype());
  for (size_t i = 0; i < index.size(); ++i) {
    std::memcpy(static_cast<char*>(out.raw_data()) + i * bytes, static_cast<const char*>(t.raw_data()) + index[i] * bytes,
                bytes);
  }
  return out;
}

// t[i] += value (float32 or float64).
void add_at(Tensor& t, int64_t i, double value) {
  if (t.dtype() == DType::kFloat32) {
    t.data<float>()[i] += static_cast<float>(value);
  } else {
    t.data<double>()[i] += value;
  }
}

// Columns index[...] of lse [N, T].
Tensor take_columns(const Tensor& lse, const std::vector<int64_t>& index) {
  Tensor out = Tensor::zeros(Shape{lse.dim(0), static_cast<int64_t>(index.size())}, lse.dtype());
  for (int64_t h = 0; h < lse.dim(0); ++h) {
    for (size_t i = 0; i < index.size(); ++i) {
      add_at(out, h * out.dim(1) + static_cast<int64_t>(i), lse.element_as_double(h * lse.dim(1) + index[i]));
    }
  }
  return out;
}

Tensor int64_tensor(const std::vector<int64_t>& v) {
  return Tensor::from_vector(Shape{static_cast<int64_t>(v.size())}, v);
}

struct CpCase {
  std::vector<int64_t> rows;  // row lengths (multiples of 2C)
  std::vector<int64_t> docs;  // document lengths, packed into the rows in order (never crossing one)
  int cp;
  int64_t nq, nkv, d;
};

// `options.bf16_operands`: both sides round q, k, v and dout to bfloat16 (mixed precision).
void check_against_single_rank(const CpCase& c, DType dtype, const AttentionOptions& options = {}) {
  const int64_t t = std::accumulate(c.rows.begin(), c.rows.end(), int64_t{0});
  std::vector<int64_t> cu{0};
  for (int64_t len : c.docs) cu.push_back(cu.back() + len);
  ASSERT_EQ(cu.back(), t);
  const Tensor cut = int64_tensor(cu);
  const Tensor q = random_tensor({t, c.nq, c.d}, dtype, 11, -2, 2), k = random_tensor({t, c.nkv, c.d}, dtype, 12, -2, 2);
  const Tensor v = random_tensor({t, c.nkv, c.d}, dtype, 13), dout = random_tensor({t, c.nq, c.d}, dtype, 14);
  Tensor out = Tensor::empty(q.shape(), dtype), lse = Tensor::empty({c.nq, t}, dtype);
  attention_fwd(q, k, v, cut, out, lse, options);
  Tensor dq = Tensor::empty(q.shape(), dtype), dk = Tensor::empty(k.shape(), dtype), dv = Tensor::empty(v.shape(), dtype);
  attention_bwd(q, k, v, cut, out, lse, dout, dq, dk, dv, options);

  const std::vector<int64_t> order = zigzag_order(c.rows, c.cp);
  ASSERT_EQ(static_cast<int64_t>(order.size()), t);
  const Tensor k_fed = take_rows(k, order), v_fed = take_rows(v, order), kv_index = int64_tensor(order);
  Tensor dk_sum = Tensor::zeros(k.shape(), dtype), dv_sum = Tensor::zeros(v.shape(), dtype);
  const double tol = dtype == DType::kFloat32 ? 1e-5 : 1e-12;
  const int64_t share = t / c.cp;
  for (int r = 0; r < c.cp; ++r) {
    const std::vector<int64_t> mine(order.begin() + r * share, order.begin() + (r + 1) * share);
    const Tensor q_r = take_rows(q, mine), dout_r = take_rows(dout, mine), q_index = int64_tensor(mine);
    Tensor out_r = Tensor::empty(q_r.shape(), dtype), lse_r = Tensor::empty({c.nq, share}, dtype);
    context_attention_fwd(q_r, k_fed, v_fed, cut, q_index, kv_index, out_r, lse_r, options);
    const std::string what = "rank " + std::to_string(r) + " of CP " + std::to_string(c.cp) + " " + std::string(dtype_name(dtype));
    EXPECT_TRUE(all_close(out_r, take_rows(out, mine), tol, tol, "out " + what));
    EXPECT_TRUE(all_close(lse_r, take_columns(lse, mine), tol, tol, "lse " + what));
    Tensor dq_r = Tensor::empty(q_r.shape(), dtype), dk_r = Tensor::empty(k.shape(), dtype);
    Tensor dv_r = Tensor::empty(v.shape(), dtype);
    context_attention_bwd(q_r, k_fed, v_fed, cut, q_index, kv_index, out_r, lse_r, dout_r, dq_r, dk_r, dv_r, options);
    EXPECT_TRUE(all_close(dq_r, take_rows(dq, mine), tol, tol, "dq " + what));
    // Back to packed order and summed over the group: the reduce-scatter of the real run.
    for (int64_t i = 0; i < t; ++i) {
      const int64_t row = c.nkv * c.d;
      for (int64_t e = 0; e < row; ++e) {
        const int64_t to = order[i] * row + e, from = i * row + e;
        add_at(dk_sum, to, dk_r.element_as_double(from));
        add_at(dv_sum, to, dv_r.element_as_double(from));
      }
    }
  }
  EXPECT_TRUE(all_close(dk_sum, dk, tol, tol, std::string("dk summed over the CP group ") + std::string(dtype_name(dtype))));
  EXPECT_TRUE(all_close(dv_sum, dv, tol, tol, std::string("dv summed over the CP group ") + std::string(dtype_name(dtype))));
}

TEST(ContextAttention, EveryRankOfAZigzagGroupMatchesTheSingleRankKernel) {
  const CpCase cases[] = {
      // CP 2: rows of 160 (chunks of 40) with documents crossing chunks and a 64-token tile.
      {{160, 160}, {10, 70, 80, 160}, 2, 4, 2, 16},
      // CP 2, GQA 4:1, one long document and many short ones.
      {{256, 128}, {256, 3, 5, 120}, 2, 4, 1, 8},
      // CP 3, odd head dim, documents of 1 token.
      {{48, 96}, {1, 1, 46, 30, 66}, 3, 2, 2, 7},
  };
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const CpCase& c : cases) check_against_single_rank(c, dtype);
  }
}

TEST(ContextAttention, Bf16OperandsOnEveryRankMatchTheSingleRankBf16Kernel) {
  // CP 2 with documents crossing chunks; both sides round their operands to bfloat16.
  check_against_single_rank({{160, 160}, {10, 70, 80, 160}, 2, 4, 2, 16}, DType::kFloat32, {.bf16_operands = true});
}

// A sliding window on both sides: shorter than the zigzag chunks (7), about a chunk or a tile (40,
// 64), and longer than most documents (200); a rank's two runs then need keys from the other runs'
// chunks, or none of them.
TEST(ContextAttention, SlidingWindowOnEveryRankMatchesTheSingleRankKernel) {
  const CpCase cases[] = {
      {{160, 160}, {10, 70, 80, 160}, 2, 4, 2, 16},
      {{256, 128}, {256, 3, 5, 120}, 2, 4, 1, 8},
      {{48, 96}, {1, 1, 46, 30, 66}, 3, 2, 2, 7},
  };
  for (int64_t window : {1, 7, 40, 64, 200}) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      for (const CpCase& c : cases) check_against_single_rank(c, dtype, {.window = window});
    }
  }
  check_against_single_rank(cases[0], DType::kFloat32, {.bf16_operands = true, .window = 40});
}

TEST(ContextAttention, IdentityIndicesArePlainAttentionBitwise) {
  const int64_t t = 90;
  const Tensor cu = int64_tensor({0, 20, 90});
  const Tensor q = random_tensor({t, 2, 8}, DType::kFloat32, 1), k = random_tensor({t, 2, 8}, DType::kFloat32, 2);
  const Tensor v = random_tensor({t, 2, 8}, DType::kFloat32, 3);
  std::vector<int64_t> ids(t);
  std::iota(ids.begin(), ids.end(), 0);
  Tensor out_a = Tensor::empty(q.shape(), DType::kFloat32), lse_a = Tensor::empty({2, t}, DType::kFloat32);
  Tensor out_b = Tensor::empty(q.shape(), DType::kFloat32), lse_b = Tensor::empty({2, t}, DType::kFloat32);
  attention_fwd(q, k, v, cu, out_a, lse_a);
  context_attention_fwd(q, k, v, cu, int64_tensor(ids), int64_tensor(ids), out_b, lse_b);
  EXPECT_EQ(std::memcmp(out_a.raw_data(), out_b.raw_data(), out_a.nbytes()), 0);
  EXPECT_EQ(std::memcmp(lse_a.raw_data(), lse_b.raw_data(), lse_a.nbytes()), 0);
}

TEST(ContextAttention, RefusesIndicesThatAreNotPositionsOfTheBatch) {
  const Tensor cu = int64_tensor({0, 4});
  const Tensor q = random_tensor({2, 1, 4}, DType::kFloat32, 1), k = random_tensor({4, 1, 4}, DType::kFloat32, 2);
  Tensor out = Tensor::empty(q.shape(), DType::kFloat32), lse = Tensor::empty({1, 2}, DType::kFloat32);
  EXPECT_THAT([&] { context_attention_fwd(q, k, k, cu, int64_tensor({0, 1}), int64_tensor({0, 1, 1, 3}), out, lse); },
              ThrowsMessage<Error>(HasSubstr("kv_index[2] = 1 is repeated; kv_index must be a permutation of 0..3")));
  EXPECT_THAT([&] { context_attention_fwd(q, k, k, cu, int64_tensor({0, 4}), int64_tensor({0, 1, 2, 3}), out, lse); },
              ThrowsMessage<Error>(HasSubstr("q_index[1] = 4 is out of range (the batch has 4 tokens)")));
  EXPECT_THAT([&] { context_attention_fwd(q, k, k, cu, int64_tensor({0}), int64_tensor({0, 1, 2, 3}), out, lse); },
              ThrowsMessage<Error>(HasSubstr("q_index is int64[1], expected 2 entries")));
}

}  // namespace
}  // namespace hspmd::kernels
