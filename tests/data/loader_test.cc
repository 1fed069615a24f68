#include "hspmd/data/loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "data/data_testlib.h"
#include "hspmd/core/error.h"
#include "hspmd/data/packing.h"

namespace hspmd::data {
namespace {

using testing::error_of;

// Random segments of 1..seq_len tokens whose token values are all distinct, so every token of a
// batch can be traced back to its segment and position.
std::vector<Segment> random_segments(std::mt19937& rng, int count, int64_t seq_len) {
  std::vector<Segment> segments;
  int32_t next = 0;
  for (int i = 0; i < count; ++i) {
    Segment s;
    s.document = static_cast<uint64_t>(i);
    int64_t length = std::uniform_int_distribution<int64_t>(1, seq_len)(rng);
    for (int64_t k = 0; k < length; ++k) s.tokens.push_back(next++);
    segments.push_back(std::move(s));
  }
  return segments;
}

// Checks everything packing promises; returns the number of label tokens.
int64_t check_batch(const Batch& b, const std::vector<Segment>& segments, const PackOptions& options) {
  const int64_t T = b.num_tokens();
  EXPECT_EQ(static_cast<int64_t>(b.targets.size()), T);
  EXPECT_EQ(static_cast<int64_t>(b.positions.size()), T);
  EXPECT_EQ(b.cu_seqlens.front(), 0);
  EXPECT_EQ(b.cu_seqlens.back(), T);
  EXPECT_EQ(b.row_offsets.front(), 0);
  EXPECT_EQ(b.row_offsets.back(), T);
  std::set<int64_t> sequence_starts(b.cu_seqlens.begin(), b.cu_seqlens.end());
  for (int64_t r = 0; r < b.num_rows(); ++r) {
    int64_t length = b.row_offsets[r + 1] - b.row_offsets[r];
    EXPECT_GT(length, 0);
    EXPECT_LE(length, options.seq_len);
    if (options.layout == BatchLayout::kPadded) {
      EXPECT_EQ(length, options.seq_len);
    }
    // A row boundary is always a sequence boundary: no attention sequence spans two rows.
    EXPECT_TRUE(sequence_starts.count(b.row_offsets[r])) << "row " << r;
  }
  std::map<int32_t, const Segment*> by_first_token;
  for (const Segment& s : segments) by_first_token[s.tokens.front()] = &s;
  std::multiset<int32_t> seen;
  for (int64_t q = 0; q < b.num_sequences(); ++q) {
    int64_t begin = b.cu_seqlens[q], end = b.cu_seqlens[q + 1];
    auto it = by_first_token.find(b.tokens[begin]);
    EXPECT_NE(it, by_first_token.end()) << "sequence " << q << " does not start a segment";
    if (it == by_first_token.end()) continue;
    const auto& tokens = it->second->tokens;
    int64_t real = static_cast<int64_t>(tokens.size());
    EXPECT_GE(end - begin, real);
    for (int64_t t = begin; t < end; ++t) {
      int64_t i = t - begin;
      EXPECT_EQ(b.positions[t], i) << "positions restart at 0 in every segment";
      if (i < real) {
        EXPECT_EQ(b.tokens[t], tokens[i]);
        seen.insert(b.tokens[t]);
        // The label is the next token of the same segment, never one across a boundary.
        EXPECT_EQ(b.targets[t], i + 1 < real ? tokens[i + 1] : kIgnoreTarget) << "token " << t;
      } else {
        EXPECT_EQ(b.tokens[t], options.pad_id);
        EXPECT_EQ(b.targets[t], kIgnoreTarget) << "padding never has a label";
      }
    }
  }
  // Every token exactly once.
  std::multiset<int32_t> expected;
  for (const Segment& s : segments) expected.insert(s.tokens.begin(), s.tokens.end());
  EXPECT_EQ(seen, expected);
  return b.num_label_tokens();
}

TEST(Packing, WorkedExampleFromTheHeader) {
  std::vector<Segment> s = {{0, 0, {10, 11, 12}}, {1, 0, {20, 21}}, {2, 0, {30, 31, 32, 33}}};
  Batch b = pack(s, {.seq_len = 5});
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{10, 11, 12, 20, 21, 30, 31, 32, 33}));
  EXPECT_EQ(b.targets, (std::vector<int32_t>{11, 12, -100, 21, -100, 31, 32, 33, -100}));
  EXPECT_EQ(b.positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 0, 1, 2, 3}));
  EXPECT_EQ(b.cu_seqlens, (std::vector<int64_t>{0, 3, 5, 9}));
  EXPECT_EQ(b.row_offsets, (std::vector<int64_t>{0, 5, 9}));
  Batch p = pack(s, {.seq_len = 5, .layout = BatchLayout::kPadded, .pad_id = 258});
  EXPECT_EQ(p.cu_seqlens, (std::vector<int64_t>{0, 5, 10, 15}));
  EXPECT_EQ(p.tokens[3], 258);
  EXPECT_EQ(p.num_label_tokens(), 6);
  // Packed to a fixed length: rows [a0 a1 a2 b0 b1] [c0 c1 c2 c3 pad], the pad its own sequence.
  Batch f = pack(s, {.seq_len = 5, .layout = BatchLayout::kPackedFixed, .pad_id = 258});
  EXPECT_EQ(f.tokens, (std::vector<int32_t>{10, 11, 12, 20, 21, 30, 31, 32, 33, 258}));
  EXPECT_EQ(f.cu_seqlens, (std::vector<int64_t>{0, 3, 5, 9, 10}));
  EXPECT_EQ(f.row_offsets, (std::vector<int64_t>{0, 5, 10}));
  EXPECT_EQ(f.targets.back(), -100);
  EXPECT_EQ(f.positions.back(), 0);
  EXPECT_EQ(f.num_label_tokens(), b.num_label_tokens());
  // One row per segment, in the given order, no padding: rows [a0 a1 a2] [b0 b1] [c0 c1 c2 c3].
  Batch r = pack(s, {.seq_len = 5, .layout = BatchLayout::kRows});
  EXPECT_EQ(r.tokens, b.tokens);
  EXPECT_EQ(r.targets, b.targets);
  EXPECT_EQ(r.positions, b.positions);
  EXPECT_EQ(r.cu_seqlens, (std::vector<int64_t>{0, 3, 5, 9}));
  EXPECT_EQ(r.row_offsets, (std::vector<int64_t>{0, 3, 5, 9}));
}

TEST(Packing, InvariantsHoldOnRandomSegmentSets) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 30; ++trial) {
    int64_t seq_len = std::uniform_int_distribution<int64_t>(1, 40)(rng);
    auto segments = random_segments(rng, std::uniform_int_distribution<int>(0, 25)(rng), seq_len);
    PackOptions packed{.seq_len = seq_len};
    PackOptions padded{.seq_len = seq_len, .layout = BatchLayout::kPadded, .pad_id = -1};
    int64_t labels = check_batch(pack(segments, packed), segments, packed);
    EXPECT_EQ(check_batch(pack(segments, padded), segments, padded), labels);
    int64_t tokens = 0;
    for (const auto& s : segments) tokens += static_cast<int64_t>(s.tokens.size());
    EXPECT_EQ(labels, tokens - static_cast<int64_t>(segments.size()));  // one label per token but the last
  }
  std::vector<Segment> too_long = {{0, 0, {1, 2, 3}}};
  EXPECT_NE(error_of([&] { pack(too_long, {.seq_len = 2}); }).find("segments need 1 to seq_len = 2"),
            std::string::npos);
}

TEST(Packing, SplitsAGlobalBatchIntoUnequalPartsKeepingEveryTokenOnce) {
  std::mt19937 rng(3);
  auto segments = random_segments(rng, 40, 64);
  std::vector<PartSpec> parts = {{.weight = 1, .micro_batches = 2}, {.weight = 2, .micro_batches = 3},
                                 {.weight = 1, .micro_batches = 1}};
  auto split = split_global_batch(segments, parts);
  ASSERT_EQ(split.size(), 3u);
  std::multiset<int32_t> seen;
  int64_t total = 0;
  std::vector<int64_t> part_tokens;
  for (size_t p = 0; p < split.size(); ++p) {
    EXPECT_EQ(static_cast<int64_t>(split[p].size()), parts[p].micro_batches);
    int64_t tokens = 0;
    for (const auto& micro : split[p]) {
      EXPECT_FALSE(micro.empty());
      for (const auto& s : micro) {
        seen.insert(s.tokens.begin(), s.tokens.end());
        tokens += static_cast<int64_t>(s.tokens.size());
      }
    }
    part_tokens.push_back(tokens);
    total += tokens;
  }
  std::multiset<int32_t> expected;
  for (const auto& s : segments) expected.insert(s.tokens.begin(), s.tokens.end());
  EXPECT_EQ(seen, expected);
  // Shares follow the weights to within one segment (greedy longest-first).
  for (size_t p = 0; p < parts.size(); ++p) EXPECT_NEAR(part_tokens[p], total * parts[p].weight / 4.0, 64) << p;
  EXPECT_EQ(split_global_batch(segments, parts)[1][2].front().tokens, split[1][2].front().tokens);  // deterministic
  std::vector<double> bad = {1.0, 0.0};
  std::vector<int64_t> lengths = {3};
  EXPECT_NE(error_of([&] { partition_by_tokens(lengths, bad); }).find("part 1 has weight 0"), std::string::npos);
}

class LoaderTest : public testing::TempDirTest {
 protected:
  // Documents of random lengths 0..3*seq_len with distinct tokens (mod vocab does not matter here:
  // the check uses (document, offset)).
  std::string random_dataset(std::mt19937& rng, int documents, int64_t max_length) {
    std::vector<std::vector<int32_t>> docs;
    for (int d = 0; d < documents; ++d) {
      int64_t length = std::uniform_int_distribution<int64_t>(0, max_length)(rng);
      std::vector<int32_t> doc;
      for (int64_t k = 0; k < length; ++k) doc.push_back(static_cast<int32_t>((d * 7 + k) % 256));
      docs.push_back(doc);
    }
    return write_dataset("ds", docs);
  }
};

TEST_F(LoaderTest, AnEpochCoversEveryChunkOnceWithinTheBudget) {
  std::mt19937 rng(11);
  TokenDataset ds = TokenDataset::open(random_dataset(rng, 50, 60));
  LoaderOptions options{.seq_len = 16, .global_batch_tokens = 64, .seed = 5};
  Loader loader(ds, options);
  std::set<std::pair<uint64_t, uint64_t>> chunks;
  uint64_t tokens = 0;
  while (loader.state().epoch == 0) {
    auto batch = loader.next();
    int64_t batch_tokens = 0;
    for (const auto& s : batch) {
      batch_tokens += static_cast<int64_t>(s.tokens.size());
      EXPECT_EQ(s.begin % 16, 0u);
      EXPECT_GE(s.tokens.size(), 2u);
      EXPECT_LE(s.tokens.size(), 16u);
      std::vector<int32_t> expected;
      ds.read(s.document, s.begin, s.tokens.size(), expected);
      EXPECT_EQ(s.tokens, expected);
      if (loader.state().epoch == 0 || chunks.count({s.document, s.begin}) == 0) {
        EXPECT_TRUE(chunks.insert({s.document, s.begin}).second) << "chunk repeated within an epoch";
        tokens += s.tokens.size();
      }
    }
    EXPECT_LE(batch_tokens, 64);
  }
  EXPECT_EQ(chunks.size(), loader.segments_per_epoch());
  EXPECT_EQ(tokens, loader.tokens_per_epoch());
  // The expected chunks: every [k*16, min(len, (k+1)*16)) of at least 2 tokens.
  uint64_t expected_chunks = 0;
  for (uint64_t d = 0; d < ds.num_documents(); ++d) {
    for (uint64_t b = 0; b < ds.document_length(d); b += 16) expected_chunks += (ds.document_length(d) - b >= 2);
  }
  EXPECT_EQ(chunks.size(), expected_chunks);
}

TEST_F(LoaderTest, DeterministicForASeedAndResumableFromAState) {
  std::mt19937 rng(13);
  TokenDataset ds = TokenDataset::open(random_dataset(rng, 30, 40));
  LoaderOptions options{.seq_len = 8, .global_batch_tokens = 40, .seed = 9};
  auto key = [](const std::vector<Segment>& batch) {
    std::vector<std::pair<uint64_t, uint64_t>> k;
    for (const auto& s : batch) k.emplace_back(s.document, s.begin);
    return k;
  };
  Loader a(ds, options), b(ds, options);
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> run;
  for (int step = 0; step < 40; ++step) {  // crosses several epochs
    run.push_back(key(a.next()));
    EXPECT_EQ(run.back(), key(b.next()));
  }
  EXPECT_GT(a.state().epoch, 1u);
  LoaderOptions other_seed = options;
  other_seed.seed = 10;
  EXPECT_NE(key(Loader(ds, other_seed).next()), run[0]);

  // Stop after 17 steps, save, resume in a fresh loader: the following batches are identical.
  Loader first(ds, options);
  for (int step = 0; step < 17; ++step) first.next();
  std::string saved = first.state().to_json();
  Loader resumed(ds, options, LoaderState::from_json(saved));
  EXPECT_EQ(resumed.state().steps, 17u);
  for (int step = 17; step < 40; ++step) EXPECT_EQ(key(resumed.next()), run[step]) << "step " << step;

  LoaderOptions in_order = options;
  in_order.shuffle = false;
  auto ordered = Loader(ds, in_order).next();
  for (size_t i = 1; i < ordered.size(); ++i) {
    EXPECT_LE(std::make_pair(ordered[i - 1].document, ordered[i - 1].begin),
              std::make_pair(ordered[i].document, ordered[i].begin));
  }
}

TEST_F(LoaderTest, RejectsBadOptionsAndStates) {
  TokenDataset ds = TokenDataset::open(write_dataset("small", {{1, 2, 3, 4}, {4, 5}}));
  EXPECT_NE(error_of([&] { Loader(ds, {.seq_len = 8, .global_batch_tokens = 4}); }).find("smaller than seq_len"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Loader(ds, {.seq_len = 8, .global_batch_tokens = 8}, {.epoch = 0, .cursor = 9}); })
                .find("cursor 9 is beyond an epoch of 2 segments"),
            std::string::npos);
  TokenDataset tiny = TokenDataset::open(write_dataset("tiny", {{1}, {}}));
  EXPECT_NE(error_of([&] { Loader(tiny, {.seq_len = 8, .global_batch_tokens = 8}); }).find("no document of 2 or more"),
            std::string::npos);
  EXPECT_NE(error_of([] { LoaderState::from_json(R"({"epoch": 1, "cursor": -2, "steps": 0})"); }).find("\"cursor\""),
            std::string::npos);
  EXPECT_NE(error_of([] { LoaderState::from_json("nope"); }).find("not valid JSON"), std::string::npos);
  LoaderState s{.epoch = 3, .cursor = 4, .steps = 5, .segments_per_epoch = 6};
  EXPECT_EQ(LoaderState::from_json(s.to_json()), s);
  EXPECT_EQ(LoaderState::from_json(R"({"epoch": 1, "cursor": 0, "steps": 2})").segments_per_epoch, 0u);
  // A state saved with another seq_len (different segments) is refused.
  Loader saver(ds, {.seq_len = 2, .global_batch_tokens = 8});
  EXPECT_EQ(saver.state().segments_per_epoch, 3u);  // {1,2} {3,4} {4,5}; seq_len 8: 2 segments
  EXPECT_NE(error_of([&] { Loader(ds, {.seq_len = 8, .global_batch_tokens = 8}, saver.state()); })
                .find("saved with 3 segments per epoch"),
            std::string::npos);
}

}  // namespace
}  // namespace hspmd::data
