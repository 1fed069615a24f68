#include "hspmd/data/long_tailed.h"

#include <algorithm>
#include <cmath>

#include "hspmd/core/error.h"
#include "hspmd/core/philox.h"

namespace hspmd::data {

std::vector<int64_t> long_tailed_lengths(const LongTailedOptions& o) {
  HSPMD_CHECK(o.median >= 2 && o.max_length >= 2 && o.sigma >= 0)
      << "long-tailed lengths: need median >= 2, max_length >= 2 and sigma >= 0; got median " << o.median
      << ", max_length " << o.max_length << ", sigma " << o.sigma;
  std::vector<int64_t> out;
  out.reserve(o.documents);
  for (uint64_t d = 0; d < o.documents; ++d) {
    const double z = philox_normal(o.seed, /*stream=*/0x10e6, d);
    const double length = std::round(o.median * std::exp(o.sigma * z));
    out.push_back(std::clamp<int64_t>(static_cast<int64_t>(length), 2, o.max_length));
  }
  return out;
}

void write_long_tailed_dataset(const TokenDataset& source, const std::string& dir, const LongTailedOptions& o) {
  const std::vector<int64_t> lengths = long_tailed_lengths(o);
  int64_t needed = 0;
  for (int64_t l : lengths) needed += l;
  HSPMD_CHECK(static_cast<uint64_t>(needed) <= source.num_tokens())
      << "long-tailed dataset: " << o.documents << " documents need " << needed << " tokens, the source "
      << source.dir() << " has " << source.num_tokens();
  TokenDatasetWriter w(dir, {.vocab_size = source.vocab_size(), .tokenizer_id = source.tokenizer_id()});
  // Walk the source's documents as one stream of tokens.
  uint64_t doc = 0, at = 0;
  std::vector<int32_t> tokens;
  for (int64_t length : lengths) {
    tokens.clear();
    while (static_cast<int64_t>(tokens.size()) < length) {
      while (at >= source.document_length(doc)) {
        ++doc;
        at = 0;
      }
      const std::vector<int32_t> part = source.document(doc);
      const uint64_t take = std::min<uint64_t>(part.size() - at, static_cast<uint64_t>(length) - tokens.size());
      tokens.insert(tokens.end(), part.begin() + static_cast<std::ptrdiff_t>(at),
                    part.begin() + static_cast<std::ptrdiff_t>(at + take));
      at += take;
    }
    w.add_document(tokens);
  }
  w.finish();
}

}  // namespace hspmd::data
