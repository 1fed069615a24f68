#include "hspmd/data/length_histogram.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <map>
#include <sstream>

#include "hspmd/core/error.h"

namespace hspmd::data {

namespace {

// Buckets [2^k, 2^(k+1)) from the shortest to the longest length seen.
std::vector<LengthBucket> bucketize(const std::map<int64_t, uint64_t>& lengths) {
  std::vector<LengthBucket> out;
  if (lengths.empty()) return out;
  const int first = std::bit_width(static_cast<uint64_t>(std::max<int64_t>(lengths.begin()->first, 1))) - 1;
  const int last = std::bit_width(static_cast<uint64_t>(std::max<int64_t>(lengths.rbegin()->first, 1))) - 1;
  for (int k = first; k <= last; ++k) out.push_back({uint64_t{1} << k, uint64_t{1} << (k + 1), 0, 0});
  for (const auto& [length, count] : lengths) {
    const int k = std::bit_width(static_cast<uint64_t>(std::max<int64_t>(length, 1))) - 1;
    LengthBucket& b = out[static_cast<size_t>(k - first)];
    b.count += count;
    b.tokens += count * static_cast<uint64_t>(length);
  }
  return out;
}

void table(std::ostringstream& out, const char* what, const std::vector<LengthBucket>& buckets) {
  uint64_t total = 0, most = 0;
  for (const LengthBucket& b : buckets) {
    total += b.tokens;
    most = std::max(most, b.tokens);
  }
  char line[200];
  std::snprintf(line, sizeof line, "  %-17s %10s %12s %7s\n", "length", what, "tokens", "tokens");
  out << line;
  for (const LengthBucket& b : buckets) {
    char range[40];
    std::snprintf(range, sizeof range, "[%llu, %llu)", static_cast<unsigned long long>(b.low),
                  static_cast<unsigned long long>(b.high));
    const int bar = most ? static_cast<int>(40.0 * static_cast<double>(b.tokens) / static_cast<double>(most) + 0.5) : 0;
    std::snprintf(line, sizeof line, "  %-17s %10llu %12llu %6.1f%% %s\n", range,
                  static_cast<unsigned long long>(b.count), static_cast<unsigned long long>(b.tokens),
                  total ? 100.0 * static_cast<double>(b.tokens) / static_cast<double>(total) : 0.0,
                  std::string(static_cast<size_t>(bar), '#').c_str());
    out << line;
  }
}

}  // namespace

LengthHistogram length_histogram(const TokenDataset& dataset, int64_t seq_len) {
  HSPMD_CHECK(seq_len >= 0) << "length histogram: seq_len must be >= 0, got " << seq_len;
  std::map<int64_t, uint64_t> docs, segs;
  for (uint64_t d = 0; d < dataset.num_documents(); ++d) {
    const int64_t n = static_cast<int64_t>(dataset.document_length(d));
    if (n == 0) continue;
    ++docs[n];
    if (seq_len == 0) continue;
    // The loader's chunks: [0, S), [S, 2S), ...; a chunk of fewer than 2 tokens is skipped.
    for (int64_t begin = 0; begin < n; begin += seq_len) {
      const int64_t length = std::min(seq_len, n - begin);
      if (length >= 2) ++segs[length];
    }
  }
  LengthHistogram h;
  h.seq_len = seq_len;
  h.documents = bucketize(docs);
  h.segments = bucketize(segs);
  h.segment_lengths.assign(segs.begin(), segs.end());
  return h;
}

std::string LengthHistogram::to_string() const {
  std::ostringstream out;
  out << "document lengths (tokens; empty documents left out):\n";
  table(out, "documents", documents);
  if (seq_len > 0) {
    out << "segment lengths at --seq-len " << seq_len << " (what a step's batch holds):\n";
    table(out, "segments", segments);
  }
  return out.str();
}

}  // namespace hspmd::data
