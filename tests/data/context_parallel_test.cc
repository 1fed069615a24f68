// The zigzag token layout of a context-parallel group (data/context_parallel.h): chunks c and
// 2C-1-c of every row for rank c, padding as a document of its own with ignored labels.
#include "hspmd/data/context_parallel.h"

#include <gtest/gtest.h>

#include "hspmd/core/error.h"

namespace hspmd::data {
namespace {

Segment seg(uint64_t doc, std::vector<int32_t> tokens) { return {doc, 0, std::move(tokens)}; }

TEST(ContextParallelLayout, OneRowOfEightTokensOverTwoRanks) {
  const std::vector<Segment> segments{seg(0, {10, 11, 12, 13, 14, 15, 16, 17})};
  const ContextParallelBatch b = zigzag_for_context_parallel(pack(segments, {.seq_len = 8}), 2);
  EXPECT_EQ(b.order, (std::vector<int64_t>{0, 1, 6, 7, 2, 3, 4, 5}));
  EXPECT_EQ(b.batch.cu_seqlens, (std::vector<int64_t>{0, 8}));
}

TEST(ContextParallelLayout, RowsArePaddedToTwiceTheDegreeWithADocumentOfTheirOwn) {
  // Rows of 5 (two documents) and 3 tokens, CP 2: padded to 8 and 4.
  const std::vector<Segment> segments{seg(0, {1, 2, 3}), seg(1, {4, 5}), seg(2, {6, 7, 8})};
  const Batch packed = pack(segments, {.seq_len = 5});
  ASSERT_EQ(packed.row_offsets, (std::vector<int64_t>{0, 5, 8}));
  const ContextParallelBatch b = zigzag_for_context_parallel(packed, 2);
  EXPECT_EQ(b.batch.tokens, (std::vector<int32_t>{1, 2, 3, 4, 5, 0, 0, 0, 6, 7, 8, 0}));
  EXPECT_EQ(b.batch.targets, (std::vector<int32_t>{2, 3, kIgnoreTarget, 5, kIgnoreTarget, kIgnoreTarget,
                                                   kIgnoreTarget, kIgnoreTarget, 7, 8, kIgnoreTarget, kIgnoreTarget}));
  EXPECT_EQ(b.batch.positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 0, 1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(b.batch.cu_seqlens, (std::vector<int64_t>{0, 3, 5, 8, 11, 12}));
  EXPECT_EQ(b.batch.row_offsets, (std::vector<int64_t>{0, 8, 12}));
  EXPECT_EQ(b.batch.num_label_tokens(), packed.num_label_tokens());
  // Rank 0: chunks 0 and 3 of each row; rank 1: chunks 1 and 2. Each holds half the tokens.
  EXPECT_EQ(b.order, (std::vector<int64_t>{0, 1, 6, 7, 8, 11, 2, 3, 4, 5, 9, 10}));
}

TEST(ContextParallelLayout, DegreeOneIsTheBatchAsItIs) {
  const Batch packed = pack(std::vector<Segment>{seg(0, {1, 2, 3})}, {.seq_len = 4});
  const ContextParallelBatch b = zigzag_for_context_parallel(packed, 1);
  EXPECT_EQ(b.batch.tokens, packed.tokens);
  EXPECT_EQ(b.order, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_THROW(zigzag_for_context_parallel(packed, 0), Error);
}

TEST(ContextParallelLayout, SequenceParallelPadsRowsToItsMultipleInPackedOrder) {
  // Rows of 5 (two documents) and 3 tokens, no CP, SP over 4 ranks: padded to 8 and 4, fed in order.
  const std::vector<Segment> segments{seg(0, {1, 2, 3}), seg(1, {4, 5}), seg(2, {6, 7, 8})};
  const Batch packed = pack(segments, {.seq_len = 5});
  const ContextParallelBatch b = zigzag_for_context_parallel(packed, 1, 4);
  EXPECT_EQ(b.batch.tokens, (std::vector<int32_t>{1, 2, 3, 4, 5, 0, 0, 0, 6, 7, 8, 0}));
  EXPECT_EQ(b.batch.cu_seqlens, (std::vector<int64_t>{0, 3, 5, 8, 11, 12}));
  EXPECT_EQ(b.batch.num_label_tokens(), packed.num_label_tokens());
  EXPECT_EQ(b.order, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  // With CP 2 and SP over 6 ranks (TP 3 x CP 2): multiples of lcm(4, 6) = 12.
  const ContextParallelBatch both = zigzag_for_context_parallel(packed, 2, 6);
  EXPECT_EQ(both.batch.row_offsets, (std::vector<int64_t>{0, 12, 24}));
  EXPECT_EQ(both.batch.cu_seqlens, (std::vector<int64_t>{0, 3, 5, 12, 15, 24}));
  EXPECT_THROW(zigzag_for_context_parallel(packed, 1, 0), Error);
}

// A pipeline given fewer rows than micro-batches runs some micro-batches empty; under CP they stay
// empty (found by the strategy generator: CP 2 pipeline of 3 micro-batches of 1 row next to a
// pipeline taking 2/3 of an 8-row batch).
TEST(ContextParallelLayout, AnEmptyMicroBatchStaysEmpty) {
  const Batch empty = pack(std::vector<Segment>{}, {.seq_len = 8});
  ASSERT_EQ(empty.num_rows(), 0);
  const ContextParallelBatch b = zigzag_for_context_parallel(empty, 2);
  EXPECT_EQ(b.batch.num_rows(), 0);
  EXPECT_EQ(b.batch.num_tokens(), 0);
  EXPECT_TRUE(b.order.empty());
}

}  // namespace
}  // namespace hspmd::data
