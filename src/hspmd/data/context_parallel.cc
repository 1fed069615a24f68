#include "hspmd/data/context_parallel.h"

#include <numeric>

#include "hspmd/core/error.h"

namespace hspmd::data {

ContextParallelBatch zigzag_for_context_parallel(const Batch& batch, int cp, int64_t row_multiple) {
  HSPMD_CHECK(cp >= 1) << "context-parallel degree must be >= 1, got " << cp;
  HSPMD_CHECK(row_multiple >= 1) << "sequence-parallel row multiple must be >= 1, got " << row_multiple;
  const int64_t multiple = std::lcm(cp > 1 ? 2 * static_cast<int64_t>(cp) : 1, row_multiple);
  ContextParallelBatch out;
  if (multiple == 1) {
    out.batch = batch;
    out.order.resize(static_cast<size_t>(batch.num_tokens()));
    std::iota(out.order.begin(), out.order.end(), int64_t{0});
    return out;
  }
  // A micro-batch without rows (a pipeline given fewer rows than it has micro-batches) stays empty:
  // every rank of the CP group gets the same empty micro-batch and runs it as the others do.
  if (batch.num_rows() == 0) {
    out.batch = batch;
    return out;
  }
  Batch& b = out.batch;
  b.cu_seqlens = {0};
  b.row_offsets = {0};
  size_t next_cu = 1;  // next document end of the input batch to copy
  for (int64_t r = 0; r < batch.num_rows(); ++r) {
    const int64_t begin = batch.row_offsets[r], end = batch.row_offsets[r + 1];
    const int64_t shift = b.num_tokens() - begin;  // padding added before this row
    b.tokens.insert(b.tokens.end(), batch.tokens.begin() + begin, batch.tokens.begin() + end);
    b.targets.insert(b.targets.end(), batch.targets.begin() + begin, batch.targets.begin() + end);
    b.positions.insert(b.positions.end(), batch.positions.begin() + begin, batch.positions.begin() + end);
    for (; next_cu < batch.cu_seqlens.size() && batch.cu_seqlens[next_cu] <= end; ++next_cu) {
      b.cu_seqlens.push_back(batch.cu_seqlens[next_cu] + shift);
    }
    const int64_t pad = (multiple - (end - begin) % multiple) % multiple;
    for (int64_t i = 0; i < pad; ++i) {
      b.tokens.push_back(0);
      b.targets.push_back(kIgnoreTarget);
      b.positions.push_back(static_cast<int32_t>(i));
    }
    if (pad > 0) b.cu_seqlens.push_back(b.num_tokens());
    b.row_offsets.push_back(b.num_tokens());
  }
  HSPMD_CHECK(b.cu_seqlens.back() == b.num_tokens())
      << "batch documents (cu_seqlens) do not end at the end of its last row";
  out.order.reserve(static_cast<size_t>(b.num_tokens()));
  if (cp == 1) {
    for (int64_t i = 0; i < b.num_tokens(); ++i) out.order.push_back(i);
    return out;
  }
  for (int c = 0; c < cp; ++c) {
    for (int64_t r = 0; r + 1 < static_cast<int64_t>(b.row_offsets.size()); ++r) {
      const int64_t chunk = (b.row_offsets[r + 1] - b.row_offsets[r]) / (2 * cp);
      for (int64_t part : {int64_t{c}, int64_t{2 * cp - 1 - c}}) {
        const int64_t first = b.row_offsets[r] + part * chunk;
        for (int64_t i = 0; i < chunk; ++i) out.order.push_back(first + i);
      }
    }
  }
  return out;
}

}  // namespace hspmd::data
