// A long-tailed mixed-length dataset made from another one's text, for tests and benchmarks of
// dispatch by length (planner/dispatcher.h): document lengths are lognormal with a given median,
// clipped to [2, max_length], and each document is the next run of the source's tokens (so the
// model learns real text, only cut to the drawn lengths). Deterministic in the seed (Philox).
//
//   write_long_tailed_dataset(TokenDataset::open("runs/kjv"), "runs/kjv-mixed",
//                             {.documents = 2000, .median = 256, .max_length = 4096, .sigma = 1.0});
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hspmd/data/token_dataset.h"

namespace hspmd::data {

struct LongTailedOptions {
  uint64_t documents = 1000;
  double median = 256;        // median length in tokens (exp(mu) of the lognormal)
  int64_t max_length = 4096;  // lengths above are clipped to this (the tail's end)
  double sigma = 1.0;         // lognormal shape: larger is a longer tail
  uint64_t seed = 0;
};

// The lengths alone (what the dataset's documents get).
std::vector<int64_t> long_tailed_lengths(const LongTailedOptions& options);

// Writes the dataset to `dir` (vocabulary and tokenizer of `source`); Error when the source has
// fewer tokens than the lengths need (it is read once, never wrapped).
void write_long_tailed_dataset(const TokenDataset& source, const std::string& dir, const LongTailedOptions& options);

}  // namespace hspmd::data
