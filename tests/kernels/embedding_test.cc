#include "hspmd/kernels/embedding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kernel_testlib.h"

namespace hspmd::kernels {
namespace {

using hspmd::testing::all_close;
using hspmd::testing::dot;
using hspmd::testing::max_relative_error;
using hspmd::testing::numeric_gradient;
using hspmd::testing::random_ints;
using hspmd::testing::random_tensor;

// Plain loops: y[t, :] = table[ids[t], :] and dtable = scatter-add of dy, in double.
Tensor reference_fwd(const Tensor& table, const Tensor& ids) {
  const int64_t h = table.dim(1);
  Tensor y = Tensor::empty({ids.numel(), h}, DType::kFloat64);
  for (int64_t t = 0; t < ids.numel(); ++t) {
    const auto row = static_cast<int64_t>(ids.element_as_double(t));
    for (int64_t i = 0; i < h; ++i) y.data<double>()[t * h + i] = table.element_as_double(row * h + i);
  }
  return y;
}

Tensor reference_bwd(const Tensor& ids, const Tensor& dy, int64_t vocab) {
  const int64_t h = dy.dim(-1);
  Tensor dtable = Tensor::zeros({vocab, h}, DType::kFloat64);
  for (int64_t t = 0; t < ids.numel(); ++t) {
    const auto row = static_cast<int64_t>(ids.element_as_double(t));
    for (int64_t i = 0; i < h; ++i) dtable.data<double>()[row * h + i] += dy.element_as_double(t * h + i);
  }
  return dtable;
}

Shape with_hidden(const Tensor& ids, int64_t h) {
  std::vector<int64_t> dims = ids.shape().dims();
  dims.push_back(h);
  return Shape(dims);
}

Tensor fwd(const Tensor& table, const Tensor& ids, const EmbeddingOptions& options = {}) {
  Tensor y = Tensor::empty(with_hidden(ids, table.dim(1)), table.dtype());
  embedding_fwd(table, ids, y, options);
  return y;
}

Tensor bwd(const Tensor& ids, const Tensor& dy, int64_t vocab, const EmbeddingOptions& options = {}) {
  Tensor dtable = Tensor::full({vocab, dy.dim(-1)}, dy.dtype(), 123.0);  // overwritten, not accumulated
  embedding_bwd(ids, dy, dtable, options);
  return dtable;
}

TEST(Embedding, ForwardAndBackwardMatchReference) {
  struct Case {
    int64_t vocab, hidden;
    Shape ids;
  };
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (DType id_dtype : {DType::kInt32, DType::kInt64}) {
      for (const Case& c : {Case{11, 5, {7}}, Case{1, 1, {3}}, Case{13, 3, {2, 9}}, Case{5, 4, {1}}}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::string(dtype_name(id_dtype)) + " V=" +
                     std::to_string(c.vocab) + " ids " + c.ids.to_string());
        Tensor table = random_tensor({c.vocab, c.hidden}, dtype, 1);
        Tensor ids = random_ints(c.ids, id_dtype, 2, 0, c.vocab);  // 9 or 18 ids in 11/13 rows: repeats
        EXPECT_TRUE(all_close(fwd(table, ids), reference_fwd(table, ids), 0, 0, "y"));
        Tensor dy = random_tensor(with_hidden(ids, c.hidden), dtype, 3);
        const double tol = dtype == DType::kFloat32 ? 1e-6 : 1e-15;
        EXPECT_TRUE(all_close(bwd(ids, dy, c.vocab), reference_bwd(ids, dy, c.vocab), tol, tol, "dtable"));
      }
    }
  }
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  Tensor table = random_tensor({6, 4}, DType::kFloat64, 4);
  Tensor ids = Tensor::from_vector<int64_t>({5}, {2, 0, 2, 5, 2});  // a repeated id, unused rows 1, 3, 4
  Tensor probe = random_tensor({5, 4}, DType::kFloat64, 5);
  Tensor dtable_num = numeric_gradient([&] { return dot(fwd(table, ids), probe); }, table);
  EXPECT_LT(max_relative_error(bwd(ids, probe, 6), dtable_num), 1e-6);
}

TEST(Embedding, EmptyTokens) {
  Tensor table = random_tensor({4, 3}, DType::kFloat32, 6);
  Tensor ids = Tensor::empty({0}, DType::kInt64);
  EXPECT_EQ(fwd(table, ids).numel(), 0);
  EXPECT_TRUE(all_close(bwd(ids, Tensor::empty({0, 3}, DType::kFloat32), 4), Tensor::zeros({4, 3}, DType::kFloat32),
                        0, 0, "dtable of no tokens"));
}

// Vocab-parallel: two shards holding rows [0, 6) and [6, 10) of the table, each giving zero rows for
// ids it does not own, sum to the full lookup; their gradients stack to the full gradient.
TEST(Embedding, VocabParallelShardsSumToFullLookup) {
  for (DType id_dtype : {DType::kInt32, DType::kInt64}) {
    Tensor full = random_tensor({10, 4}, DType::kFloat64, 7);
    Tensor ids = random_ints({12}, id_dtype, 8, 0, 10);
    Tensor dy = random_tensor({12, 4}, DType::kFloat64, 9);
    Tensor sum = Tensor::zeros({12, 4}, DType::kFloat64);
    Tensor stacked = Tensor::empty({10, 4}, DType::kFloat64);
    for (auto [start, rows] : {std::pair<int64_t, int64_t>{0, 6}, {6, 4}}) {
      const EmbeddingOptions shard{.vocab_start = start, .outside_ids_are_zero = true};
      Tensor table = Tensor::empty({rows, 4}, DType::kFloat64);
      std::memcpy(table.raw_data(), full.data<double>() + start * 4, table.nbytes());
      Tensor y = fwd(table, ids, shard);
      for (int64_t i = 0; i < sum.numel(); ++i) sum.data<double>()[i] += y.data<double>()[i];
      Tensor dtable = bwd(ids, dy, rows, shard);
      std::memcpy(stacked.data<double>() + start * 4, dtable.raw_data(), dtable.nbytes());
    }
    EXPECT_TRUE(all_close(sum, fwd(full, ids), 0, 0, "sum of shards"));
    EXPECT_TRUE(all_close(stacked, bwd(ids, dy, 10), 0, 0, "stacked shard gradients"));
  }
}

// padding_id (PyTorch's padding_idx): the lookup is unchanged, the pad row gets no gradient and every
// other row the gradient it gets without one; in a vocab-parallel shard the id is a global one.
TEST(Embedding, PaddingIdRowGetsNoGradient) {
  Tensor table = random_tensor({10, 4}, DType::kFloat64, 12);
  Tensor ids = Tensor::from_vector<int64_t>({6}, {7, 3, 7, 0, 9, 7});
  Tensor dy = random_tensor({6, 4}, DType::kFloat64, 13);
  const EmbeddingOptions pad7{.padding_id = 7};
  EXPECT_TRUE(all_close(fwd(table, ids, pad7), fwd(table, ids), 0, 0, "lookup with a padding id"));
  Tensor expected = reference_bwd(ids, dy, 10);
  for (int64_t i = 0; i < 4; ++i) expected.data<double>()[7 * 4 + i] = 0.0;
  EXPECT_TRUE(all_close(bwd(ids, dy, 10, pad7), expected, 0, 0, "dtable"));

  const EmbeddingOptions shard{.vocab_start = 6, .outside_ids_are_zero = true, .padding_id = 7};
  Tensor dshard = bwd(ids, dy, 4, shard);  // rows 6..9: row 7 (local 1) padded
  for (int64_t i = 0; i < dshard.numel(); ++i) {
    EXPECT_EQ(dshard.data<double>()[i], expected.data<double>()[6 * 4 + i]) << "element " << i;
  }
}

// Many tokens hit the same rows; the scatter-add must give the same bits for any thread count.
TEST(Embedding, BackwardIsBitwiseIndependentOfThreadCount) {
  Tensor ids = random_ints({2000}, DType::kInt64, 10, 0, 150);
  Tensor dy = random_tensor({2000, 130}, DType::kFloat32, 11);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  Tensor one = bwd(ids, dy, 150);
  omp_set_num_threads(3);
  Tensor three = bwd(ids, dy, 150);
  omp_set_num_threads(saved);
  EXPECT_EQ(std::memcmp(one.raw_data(), three.raw_data(), one.nbytes()), 0);
}

TEST(Embedding, OutOfRangeIdNamesIdAndPosition) {
  using ::testing::AllOf;
  using ::testing::HasSubstr;
  using hspmd::testing::error_of;
  Tensor table = random_tensor({11, 3}, DType::kFloat32, 12);
  Tensor too_big = Tensor::from_vector<int64_t>({3}, {0, 3, 11});
  Tensor negative = Tensor::from_vector<int32_t>({2}, {-1, 4});
  EXPECT_THAT(error_of([&] { fwd(table, too_big); }),
              AllOf(HasSubstr("embedding_fwd"), HasSubstr("id 11 at position 2"), HasSubstr("[0, 11)")));
  EXPECT_THAT(error_of([&] { fwd(table, negative); }), HasSubstr("id -1 at position 0"));
  // A shard without outside_ids_are_zero rejects ids of other shards, naming its range.
  EXPECT_THAT(error_of([&] { fwd(table, too_big, {.vocab_start = 5}); }),
              AllOf(HasSubstr("id 0 at position 0"), HasSubstr("[5, 16)")));
  EXPECT_THAT(error_of([&] { bwd(too_big, random_tensor({3, 3}, DType::kFloat32, 1), 11); }),
              AllOf(HasSubstr("embedding_bwd"), HasSubstr("id 11 at position 2")));
  EXPECT_THAT(error_of([&] { embedding_fwd(table, too_big, Tensor::empty({3, 4}, DType::kFloat32)); }),
              AllOf(HasSubstr("embedding_fwd"), HasSubstr("y float32[3, 4] must be [3, 3]")));
  EXPECT_THAT(error_of([&] { fwd(table, Tensor::empty({2}, DType::kFloat32)); }),
              AllOf(HasSubstr("embedding_fwd"), HasSubstr("'ids' is float32[2]")));
}

}  // namespace
}  // namespace hspmd::kernels
