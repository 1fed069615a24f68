// The length distribution of a dataset, for `hspmd data info` and the mixed-length planner
// (planner/mixed_length_planner.h): how many documents, and how many of the loader's segments
// (documents cut into chunks of at most seq_len tokens, data/loader.h), fall into each length bucket,
// and the tokens they hold. Buckets double: [1, 2), [2, 4), ..., [2^k, 2^(k+1)).
//
//   LengthHistogram h = length_histogram(ds, /*seq_len=*/4096);
//   h.documents[3].count     // documents of 8..15 tokens
//   std::cout << h.to_string();
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hspmd/data/token_dataset.h"

namespace hspmd::data {

struct LengthBucket {
  uint64_t low = 0, high = 0;  // lengths in [low, high)
  uint64_t count = 0;          // documents (or segments) in the bucket
  uint64_t tokens = 0;         // their tokens
};

struct LengthHistogram {
  int64_t seq_len = 0;                 // segments are cut at this length (0: no segments)
  std::vector<LengthBucket> documents;  // every bucket from the shortest to the longest, empty ones too
  std::vector<LengthBucket> segments;   // the same for the loader's segments (>= 2 tokens)
  // Every segment length with its count, ascending (what the planner's dynamic program reads).
  std::vector<std::pair<int64_t, uint64_t>> segment_lengths;

  // Two tables with a bar of '#' per bucket proportional to its tokens.
  std::string to_string() const;
};

// Error when seq_len < 0. seq_len 0: documents only.
LengthHistogram length_histogram(const TokenDataset& dataset, int64_t seq_len);

}  // namespace hspmd::data
