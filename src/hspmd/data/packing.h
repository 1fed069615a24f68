// From whole documents to what the model consumes: segments, packed or padded batches, and the
// split of a global batch across pipelines / data-parallel groups (architecture §9).
//
// A Segment is the unit of batching: a whole document, or a chunk of at most seq_len tokens of a
// longer one (chunks are consecutive, [0, S), [S, 2S), ...; the last may be shorter). Attention and
// labels never cross a segment: target[t] = token[t + 1] inside a segment, kIgnoreTarget (-100) at
// its last token, and positions restart at 0 in every segment.
//
//   segments A = {a0 a1 a2}, B = {b0 b1}, C = {c0 c1 c2 c3}, seq_len 5, packed:
//     rows        [a0 a1 a2 b0 b1] [c0 c1 c2 c3]        row_offsets {0, 5, 9}
//     tokens      a0 a1 a2 b0 b1 c0 c1 c2 c3           T = 9 (no padding)
//     targets     a1 a2 -100 b1 -100 c1 c2 c3 -100
//     positions   0 1 2 0 1 0 1 2 3
//     cu_seqlens  {0, 3, 5, 9}                         (kernels::attention_fwd's varlen format)
//   padded (one segment per row, pad_id filling each row to seq_len, pads' targets -100):
//     tokens      a0 a1 a2 p p  b0 b1 p p p  c0 c1 c2 c3 p   cu_seqlens {0, 5, 10, 15}
//
// The loss of a step is normalized by the label count of the *global* batch
// (num_label_tokens() summed over every part), never per micro-batch.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hspmd::data {

inline constexpr int32_t kIgnoreTarget = -100;

struct Segment {
  uint64_t document = 0;  // index in the dataset
  uint64_t begin = 0;     // offset of tokens[0] within the document
  std::vector<int32_t> tokens;
};

// kPackedFixed: packed like kPacked, then each row's tail padded to seq_len (the pads one attention
// sequence of their own, targets kIgnoreTarget): every row costs a full seq_len, the usual "pack to
// a fixed length" batching that dispatch by length is compared against (bench/dispatch_bench.cc).
// kRows: one segment per row in the given order, each row as long as its segment (no padding): the
// batches a script gives the Python API's Trainer.step, each sequence one row.
enum class BatchLayout { kPacked, kPadded, kPackedFixed, kRows };

struct PackOptions {
  int64_t seq_len = 0;  // row capacity; every segment must fit in one row
  BatchLayout layout = BatchLayout::kPacked;
  int32_t pad_id = 0;   // token id of padding (kPadded only; its targets are kIgnoreTarget)
};

// One (micro-)batch, flattened: T tokens, row after row.
struct Batch {
  std::vector<int32_t> tokens;       // [T]
  std::vector<int32_t> targets;      // [T]
  std::vector<int32_t> positions;    // [T]
  std::vector<int64_t> cu_seqlens;   // [nseq + 1] attention segments; cu_seqlens[0] = 0, back() = T
  std::vector<int64_t> row_offsets;  // [rows + 1] row boundaries (packed: <= seq_len each; padded: = seq_len)

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_rows() const { return static_cast<int64_t>(row_offsets.size()) - 1; }
  int64_t num_sequences() const { return static_cast<int64_t>(cu_seqlens.size()) - 1; }
  // Tokens that carry a label (target != kIgnoreTarget).
  int64_t num_label_tokens() const;
};

// Packed: segments are placed first-fit, in order, into rows of seq_len tokens (a segment goes to
// the first row with room, else opens a new row), then rows are flattened. Padded: one row each.
Batch pack(std::span<const Segment> segments, const PackOptions& options);

// Assigns items of the given token lengths to parts whose token shares follow `weights`
// (all > 0): longest first, each to the part whose load/weight after taking it is lowest (ties: the
// lower part). Returns, per part, the item indices in ascending order. Every index appears in
// exactly one part; deterministic.
std::vector<std::vector<size_t>> partition_by_tokens(std::span<const int64_t> lengths, std::span<const double> weights);

// One pipeline / data-parallel group: its share of the global batch's tokens and how many
// micro-batches it runs (different parts may differ in both: heterogeneous pipelines).
struct PartSpec {
  double weight = 1.0;
  int64_t micro_batches = 1;
};

// The segments of one micro-batch.
using MicroBatchSegments = std::vector<Segment>;
// A global batch split over parts (pipelines): split[p][m] = the segments of micro-batch m of part p.
using BatchSplit = std::vector<std::vector<MicroBatchSegments>>;

// Every segment of `global` lands in exactly one micro-batch; a part with fewer segments than
// micro-batches gets empty micro-batches.
BatchSplit split_global_batch(std::span<const Segment> global, std::span<const PartSpec> parts);

}  // namespace hspmd::data
