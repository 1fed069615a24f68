#include "hspmd/data/loader.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "hspmd/core/error.h"
#include "hspmd/core/philox.h"

namespace hspmd::data {

std::string LoaderState::to_json() const {
  return nlohmann::json{{"epoch", epoch}, {"cursor", cursor}, {"steps", steps}, {"segments_per_epoch", segments_per_epoch}}
      .dump();
}

LoaderState LoaderState::from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    HSPMD_THROW() << "loader state is not valid JSON: " << e.what();
  }
  HSPMD_CHECK(j.is_object()) << "loader state " << text << " is not a JSON object";
  LoaderState state;
  for (auto [key, field] : {std::pair{"epoch", &state.epoch}, {"cursor", &state.cursor}, {"steps", &state.steps}}) {
    HSPMD_CHECK(j.contains(key) && j[key].is_number_unsigned())
        << "loader state " << text << ": \"" << key << "\" missing or not a non-negative integer";
    *field = j[key].get<uint64_t>();
  }
  if (j.contains("segments_per_epoch")) {  // optional: absent in states written before it existed
    HSPMD_CHECK(j["segments_per_epoch"].is_number_unsigned())
        << "loader state " << text << ": \"segments_per_epoch\" is not a non-negative integer";
    state.segments_per_epoch = j["segments_per_epoch"].get<uint64_t>();
  }
  return state;
}

Loader::Loader(const TokenDataset& dataset, LoaderOptions options, LoaderState state)
    : dataset_(&dataset), options_(options), state_(state) {
  HSPMD_CHECK(options_.seq_len >= 2) << "loader: seq_len must be at least 2, got " << options_.seq_len;
  HSPMD_CHECK(options_.global_batch_tokens >= options_.seq_len)
      << "loader: global_batch_tokens " << options_.global_batch_tokens << " is smaller than seq_len "
      << options_.seq_len << " (a step must hold at least one full-length segment)";
  uint64_t seq_len = static_cast<uint64_t>(options_.seq_len);
  for (uint64_t d = 0; d < dataset.num_documents(); ++d) {
    uint64_t length = dataset.document_length(d);
    for (uint64_t begin = 0; begin < length; begin += seq_len) {
      uint64_t chunk = std::min(seq_len, length - begin);
      if (chunk < 2) continue;  // no (input, next token) pair in it
      chunks_.push_back({d, begin, static_cast<uint32_t>(chunk)});
      tokens_per_epoch_ += chunk;
    }
  }
  HSPMD_CHECK(!chunks_.empty()) << "dataset " << dataset.dir() << " has no document of 2 or more tokens";
  HSPMD_CHECK(state_.segments_per_epoch == 0 || state_.segments_per_epoch == chunks_.size())
      << "loader state was saved with " << state_.segments_per_epoch << " segments per epoch, but dataset "
      << dataset.dir() << " with seq_len " << options_.seq_len << " has " << chunks_.size()
      << " (another dataset or seq_len than the run being resumed?)";
  state_.segments_per_epoch = chunks_.size();
  HSPMD_CHECK(state_.cursor < chunks_.size())
      << "loader state cursor " << state_.cursor << " is beyond an epoch of " << chunks_.size()
      << " segments (state saved for another dataset or seq_len?)";
}

void Loader::build_order() {
  if (order_epoch_ == state_.epoch) return;
  order_.resize(chunks_.size());
  std::iota(order_.begin(), order_.end(), uint64_t{0});
  if (options_.shuffle) {
    // Fisher-Yates; draw i comes from Philox(seed, stream = epoch, counter = i), so an epoch's
    // order is a pure function of (seed, epoch) and resuming needs only the cursor.
    for (uint64_t i = order_.size() - 1; i > 0; --i) {
      auto r = philox4x32(options_.seed, state_.epoch, i);
      uint64_t draw = (static_cast<uint64_t>(r[0]) << 32) | r[1];
      std::swap(order_[i], order_[draw % (i + 1)]);  // modulo bias < 2^-32 for any real dataset
    }
  }
  order_epoch_ = state_.epoch;
}

std::vector<Segment> Loader::next() {
  std::vector<Segment> batch;
  int64_t tokens = 0;
  while (true) {
    build_order();
    const Chunk& chunk = chunks_[order_[state_.cursor]];
    if (!batch.empty() && tokens + chunk.length > options_.global_batch_tokens) break;
    Segment& segment = batch.emplace_back();
    segment.document = chunk.document;
    segment.begin = chunk.begin;
    dataset_->read(chunk.document, chunk.begin, chunk.length, segment.tokens);
    tokens += chunk.length;
    if (++state_.cursor == chunks_.size()) {
      state_.cursor = 0;
      ++state_.epoch;
    }
  }
  ++state_.steps;
  return batch;
}

}  // namespace hspmd::data
