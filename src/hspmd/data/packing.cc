#include "hspmd/data/packing.h"

#include <algorithm>
#include <numeric>

#include "hspmd/core/error.h"

namespace hspmd::data {
namespace {

// Appends one segment: its tokens, next-token targets within it, positions from 0.
void append_segment(Batch& batch, const Segment& segment) {
  const auto& t = segment.tokens;
  for (size_t i = 0; i < t.size(); ++i) {
    batch.tokens.push_back(t[i]);
    batch.targets.push_back(i + 1 < t.size() ? t[i + 1] : kIgnoreTarget);
    batch.positions.push_back(static_cast<int32_t>(i));
  }
}

// Appends `count` pads, whose targets are ignored, at positions first_position, first_position + 1, ...
void append_padding(Batch& batch, int64_t first_position, int64_t count, int32_t pad_id) {
  for (int64_t i = first_position; i < first_position + count; ++i) {
    batch.tokens.push_back(pad_id);
    batch.targets.push_back(kIgnoreTarget);
    batch.positions.push_back(static_cast<int32_t>(i));
  }
}

}  // namespace

int64_t Batch::num_label_tokens() const {
  return std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t != kIgnoreTarget; });
}

Batch pack(std::span<const Segment> segments, const PackOptions& options) {
  HSPMD_CHECK(options.seq_len > 0) << "pack: seq_len must be positive, got " << options.seq_len;
  for (const Segment& s : segments) {
    HSPMD_CHECK(!s.tokens.empty() && static_cast<int64_t>(s.tokens.size()) <= options.seq_len)
        << "pack: segment of document " << s.document << " at " << s.begin << " has " << s.tokens.size()
        << " tokens; segments need 1 to seq_len = " << options.seq_len;
  }
  Batch batch;
  batch.cu_seqlens = {0};
  batch.row_offsets = {0};
  if (options.layout == BatchLayout::kPadded) {
    for (const Segment& s : segments) {
      append_segment(batch, s);
      const int64_t used = static_cast<int64_t>(s.tokens.size());
      append_padding(batch, used, options.seq_len - used, options.pad_id);  // positions continue the segment's
      // The whole row is one attention sequence: real tokens precede the pads, so causal attention
      // never lets a real token see padding.
      batch.cu_seqlens.push_back(batch.num_tokens());
      batch.row_offsets.push_back(batch.num_tokens());
    }
    return batch;
  }
  if (options.layout == BatchLayout::kRows) {
    for (const Segment& s : segments) {
      append_segment(batch, s);
      batch.cu_seqlens.push_back(batch.num_tokens());
      batch.row_offsets.push_back(batch.num_tokens());
    }
    return batch;
  }
  // First-fit: rows[r] lists the segments placed in row r.
  std::vector<std::vector<size_t>> rows;
  std::vector<int64_t> room;
  for (size_t i = 0; i < segments.size(); ++i) {
    int64_t length = static_cast<int64_t>(segments[i].tokens.size());
    size_t r = 0;
    while (r < rows.size() && room[r] < length) ++r;
    if (r == rows.size()) {
      rows.emplace_back();
      room.push_back(options.seq_len);
    }
    rows[r].push_back(i);
    room[r] -= length;
  }
  for (const auto& row : rows) {
    for (size_t i : row) {
      append_segment(batch, segments[i]);
      batch.cu_seqlens.push_back(batch.num_tokens());
    }
    const int64_t fill = options.seq_len - (batch.num_tokens() - batch.row_offsets.back());
    if (options.layout == BatchLayout::kPackedFixed && fill > 0) {
      append_padding(batch, 0, fill, options.pad_id);  // a sequence of its own, from position 0
      batch.cu_seqlens.push_back(batch.num_tokens());
    }
    batch.row_offsets.push_back(batch.num_tokens());
  }
  return batch;
}

std::vector<std::vector<size_t>> partition_by_tokens(std::span<const int64_t> lengths, std::span<const double> weights) {
  HSPMD_CHECK(!weights.empty()) << "partition_by_tokens: no parts";
  for (size_t p = 0; p < weights.size(); ++p) {
    HSPMD_CHECK(weights[p] > 0) << "partition_by_tokens: part " << p << " has weight " << weights[p]
                                << "; weights must be positive";
  }
  std::vector<size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::vector<size_t>> parts(weights.size());
  std::vector<double> load(weights.size(), 0.0);
  for (size_t i : order) {
    size_t best = 0;
    double best_cost = 0;
    for (size_t p = 0; p < weights.size(); ++p) {
      double cost = (load[p] + static_cast<double>(lengths[i])) / weights[p];
      if (p == 0 || cost < best_cost) {
        best = p;
        best_cost = cost;
      }
    }
    parts[best].push_back(i);
    load[best] += static_cast<double>(lengths[i]);
  }
  for (auto& part : parts) std::sort(part.begin(), part.end());
  return parts;
}

BatchSplit split_global_batch(std::span<const Segment> global, std::span<const PartSpec> parts) {
  std::vector<int64_t> lengths;
  for (const Segment& s : global) lengths.push_back(static_cast<int64_t>(s.tokens.size()));
  std::vector<double> weights;
  for (size_t p = 0; p < parts.size(); ++p) {
    HSPMD_CHECK(parts[p].micro_batches >= 1) << "split_global_batch: part " << p << " has "
                                             << parts[p].micro_batches << " micro-batches; needs at least 1";
    weights.push_back(parts[p].weight);
  }
  BatchSplit result(parts.size());
  auto by_part = partition_by_tokens(lengths, weights);
  for (size_t p = 0; p < parts.size(); ++p) {
    std::vector<int64_t> part_lengths;
    for (size_t i : by_part[p]) part_lengths.push_back(lengths[i]);
    std::vector<double> equal(static_cast<size_t>(parts[p].micro_batches), 1.0);
    for (const auto& micro : partition_by_tokens(part_lengths, equal)) {
      auto& out = result[p].emplace_back();
      for (size_t j : micro) out.push_back(global[by_part[p][j]]);
    }
  }
  return result;
}

}  // namespace hspmd::data
