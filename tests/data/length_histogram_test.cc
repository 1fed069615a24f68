// Length histograms of documents and of the loader's segments, and the long-tailed dataset maker.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "data/data_testlib.h"
#include "hspmd/data/length_histogram.h"
#include "hspmd/data/loader.h"
#include "hspmd/data/long_tailed.h"

namespace hspmd::data {
namespace {

using ::testing::HasSubstr;

class LengthHistogramTest : public testing::TempDirTest {};

std::vector<int32_t> doc(size_t n) { return std::vector<int32_t>(n, 7); }

TEST_F(LengthHistogramTest, DocumentsAndSegmentsFallIntoDoublingBuckets) {
  // Lengths 3, 5, 8, 20 and an empty document; at seq_len 8 the 20 becomes 8 + 8 + 4.
  const TokenDataset ds = TokenDataset::open(write_dataset("d", {doc(3), doc(5), {}, doc(8), doc(20)}));
  const LengthHistogram h = length_histogram(ds, 8);
  ASSERT_EQ(h.documents.size(), 4u);  // [2,4) [4,8) [8,16) [16,32)
  EXPECT_EQ(h.documents[0].low, 2u);
  EXPECT_EQ(h.documents[0].count, 1u);
  EXPECT_EQ(h.documents[1].count, 1u);
  EXPECT_EQ(h.documents[2].count, 1u);
  EXPECT_EQ(h.documents[3].count, 1u);
  EXPECT_EQ(h.documents[3].tokens, 20u);
  // Segments 3 | 5, 4 | 8, 8, 8: [2,4) 1, [4,8) 2, [8,16) 3.
  ASSERT_EQ(h.segments.size(), 3u);
  EXPECT_EQ(h.segments[0].count, 1u);
  EXPECT_EQ(h.segments[1].count, 2u);
  EXPECT_EQ(h.segments[2].count, 3u);
  EXPECT_EQ(h.segments[2].tokens, 24u);
  const std::vector<std::pair<int64_t, uint64_t>> lengths{{3, 1}, {4, 1}, {5, 1}, {8, 3}};
  EXPECT_EQ(h.segment_lengths, lengths);
  // The segments are exactly the loader's.
  Loader loader(ds, {.seq_len = 8, .global_batch_tokens = 1000, .shuffle = false});
  EXPECT_EQ(loader.segments_per_epoch(), 6u);
  const std::string text = h.to_string();
  EXPECT_THAT(text, HasSubstr("[8, 16)"));
  EXPECT_THAT(text, HasSubstr("segment lengths at --seq-len 8"));
  EXPECT_FALSE(length_histogram(ds, 0).to_string().find("segment lengths") != std::string::npos);
}

TEST_F(LengthHistogramTest, LongTailedDatasetFollowsItsLengths) {
  std::vector<std::vector<int32_t>> source;
  for (int d = 0; d < 20; ++d) {
    std::vector<int32_t> t(500);
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((d * 500 + i) % 250);
    source.push_back(t);
  }
  const TokenDataset src = TokenDataset::open(write_dataset("src", source));
  const LongTailedOptions o{.documents = 200, .median = 16, .max_length = 256, .sigma = 1.0, .seed = 5};
  write_long_tailed_dataset(src, path("mixed"), o);
  const TokenDataset ds = TokenDataset::open(path("mixed"));
  const std::vector<int64_t> lengths = long_tailed_lengths(o);
  ASSERT_EQ(ds.num_documents(), 200u);
  for (uint64_t d = 0; d < 200; ++d) EXPECT_EQ(static_cast<int64_t>(ds.document_length(d)), lengths[d]);
  std::vector<int64_t> sorted = lengths;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NEAR(static_cast<double>(sorted[100]), 16.0, 4.0);  // the median
  EXPECT_GT(sorted.back(), 6 * 16);                          // a tail
  EXPECT_LE(sorted.back(), 256);
  // The text is the source's stream, in order.
  EXPECT_EQ(ds.document(1).front(), src.document(0)[static_cast<size_t>(lengths[0])]);
  EXPECT_THAT(testing::error_of([&] { write_long_tailed_dataset(src, path("big"), {.documents = 100000, .median = 64}); }),
              HasSubstr("need"));
}

}  // namespace
}  // namespace hspmd::data
