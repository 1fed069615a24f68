// The training data loader: per step, a global batch of whole segments (packing.h) up to a token
// budget, in a shuffled order that is a pure function of (seed, epoch), resumable from a state.
//
//   TokenDataset ds = TokenDataset::open("data/kjv");
//   Loader loader(ds, {.seq_len = 256, .global_batch_tokens = 4096, .seed = 1});
//   std::vector<Segment> global = loader.next();          // <= 4096 tokens, whole segments
//   Batch batch = pack(global, {.seq_len = 256});         // or split_global_batch(global, parts)
//   std::string saved = loader.state().to_json();         // into the checkpoint
//   Loader resumed(ds, options, LoaderState::from_json(saved));   // yields the same next batches
//
// Segments: each document is cut into chunks of seq_len tokens (the last chunk shorter); a chunk
// of fewer than 2 tokens is skipped, since it holds no (input, next token) pair. An epoch is one
// pass over all chunks in the order of a Fisher-Yates shuffle driven by Philox(seed, epoch) (or
// dataset order without shuffle). A step takes chunks in that order while they fit the budget and
// stops at the first that does not (never skipping ahead, so the state is one cursor); a step may
// run into the next epoch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hspmd/data/packing.h"
#include "hspmd/data/token_dataset.h"

namespace hspmd::data {

struct LoaderOptions {
  int64_t seq_len = 512;               // longest segment (the context length)
  int64_t global_batch_tokens = 8192;  // token budget of one step; >= seq_len
  uint64_t seed = 0;
  bool shuffle = true;                 // false: dataset order (for evaluation)
};

// Where the loader stands: the next segment is order(epoch)[cursor]. Small and serializable.
struct LoaderState {
  uint64_t epoch = 0;
  uint64_t cursor = 0;
  uint64_t steps = 0;  // global batches yielded so far
  // Segments per epoch of the loader that saved the state (0: unknown). A resume with another
  // dataset or seq_len cuts different segments, so a mismatch is an Error rather than a silent skew.
  uint64_t segments_per_epoch = 0;

  std::string to_json() const;  // {"epoch":0,"cursor":17,"steps":3,"segments_per_epoch":338}
  static LoaderState from_json(const std::string& text);  // Error naming the bad field
  friend bool operator==(const LoaderState&, const LoaderState&) = default;
};

class Loader {
 public:
  // The dataset must outlive the loader. Error when no document yields a segment of >= 2 tokens
  // or when state.cursor is beyond an epoch.
  Loader(const TokenDataset& dataset, LoaderOptions options, LoaderState state = {});

  // The next global batch (at least one segment; total tokens <= global_batch_tokens).
  std::vector<Segment> next();

  const LoaderState& state() const { return state_; }
  const LoaderOptions& options() const { return options_; }
  uint64_t segments_per_epoch() const { return chunks_.size(); }
  uint64_t tokens_per_epoch() const { return tokens_per_epoch_; }

 private:
  struct Chunk {
    uint64_t document;
    uint64_t begin;
    uint32_t length;
  };
  void build_order();  // order_ for state_.epoch

  const TokenDataset* dataset_;
  LoaderOptions options_;
  LoaderState state_;
  std::vector<Chunk> chunks_;    // dataset order
  std::vector<uint64_t> order_;  // permutation of chunk indices for the current epoch
  uint64_t order_epoch_ = UINT64_MAX;
  uint64_t tokens_per_epoch_ = 0;
};

}  // namespace hspmd::data
