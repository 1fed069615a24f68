// Embedding lookup on the CPU (spec in kernels/embedding.h). Ids are first mapped to table rows in
// one serial pass (so an out-of-range id is reported before any output is written, and no error
// has to escape an OpenMP region); the copy then runs in parallel over tokens.
// The backward groups tokens by table row (a stable counting sort) and sums each row's tokens in
// token order, in parallel over rows: the result is bitwise the same for every thread count.
#include "hspmd/kernels/embedding.h"

#include <algorithm>
#include <vector>

#include "hspmd/kernels/cpu/typed_visit.h"

namespace hspmd::kernels {
namespace {

using cpu::kParallelThreshold;

constexpr int64_t kNoRow = -1;  // an id outside this shard, looked up as a zero row

// Table row of every token: ids[t] - vocab_start, or kNoRow for an id outside
// [vocab_start, vocab_start + vocab) when options allow it; an Error otherwise.
std::vector<int64_t> table_rows(const char* kernel, const Tensor& ids, int64_t vocab,
                                const EmbeddingOptions& options) {
  std::vector<int64_t> rows(static_cast<size_t>(ids.numel()));
  cpu::visit_index(kernel, "ids", ids, [&](const auto* id) {
    for (int64_t t = 0; t < ids.numel(); ++t) {
      const int64_t row = static_cast<int64_t>(id[t]) - options.vocab_start;
      if (row >= 0 && row < vocab) {
        rows[t] = row;
        continue;
      }
      if (!options.outside_ids_are_zero) {
        HSPMD_THROW() << kernel << ": id " << id[t] << " at position " << t << " of ids " << ids.to_string()
                      << " is outside the table's vocabulary range [" << options.vocab_start << ", "
                      << options.vocab_start + vocab << ")";
      }
      rows[t] = kNoRow;
    }
  });
  return rows;
}

// Checks table-like [V, H] and activation-like ids.shape + [H]; returns H.
int64_t check_shapes(const char* kernel, const char* table_name, const Tensor& table, const Tensor& ids,
                     const char* act_name, const Tensor& act) {
  cpu::check_floating(kernel, table_name, table);
  HSPMD_CHECK(table.rank() == 2) << kernel << ": " << table_name << " " << table.to_string() << " must be [V, H]";
  cpu::check_defined(kernel, "ids", ids);
  cpu::check_same_dtype(kernel, table_name, table, act_name, act);
  std::vector<int64_t> expected = ids.shape().dims();
  expected.push_back(table.dim(1));
  HSPMD_CHECK(act.shape() == Shape(expected))
      << kernel << ": " << act_name << " " << act.to_string() << " must be " << Shape(expected).to_string()
      << " (ids " << ids.to_string() << " by H of " << table_name << " " << table.to_string() << ")";
  return table.dim(1);
}

template <typename T>
void gather(const T* table, const std::vector<int64_t>& rows, int64_t hidden, T* y) {
  const auto tokens = static_cast<int64_t>(rows.size());
#pragma omp parallel for schedule(static) if (tokens * hidden >= kParallelThreshold)
  for (int64_t t = 0; t < tokens; ++t) {
    T* yr = y + t * hidden;
    if (rows[t] == kNoRow) {
      std::fill(yr, yr + hidden, T(0));
    } else {
      std::copy(table + rows[t] * hidden, table + (rows[t] + 1) * hidden, yr);
    }
  }
}

template <typename T>
void scatter_add(const T* dy, const std::vector<int64_t>& rows, int64_t vocab, int64_t hidden, T* dtable) {
  // Counting sort of tokens by row, stable, so each row's tokens stay in token order.
  std::vector<int64_t> start(static_cast<size_t>(vocab) + 1, 0);
  for (int64_t row : rows) {
    if (row != kNoRow) ++start[row + 1];
  }
  for (int64_t v = 0; v < vocab; ++v) start[v + 1] += start[v];
  std::vector<int64_t> tokens_by_row(static_cast<size_t>(start[vocab]));
  std::vector<int64_t> next(start.begin(), start.end() - 1);
  for (int64_t t = 0; t < static_cast<int64_t>(rows.size()); ++t) {
    if (rows[t] != kNoRow) tokens_by_row[next[rows[t]]++] = t;
  }
#pragma omp parallel if (vocab * hidden >= kParallelThreshold)
  {
    std::vector<double> acc(static_cast<size_t>(hidden));
#pragma omp for schedule(static)
    for (int64_t v = 0; v < vocab; ++v) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t k = start[v]; k < start[v + 1]; ++k) {
        const T* dyr = dy + tokens_by_row[k] * hidden;
        for (int64_t i = 0; i < hidden; ++i) acc[i] += dyr[i];
      }
      T* out = dtable + v * hidden;
      for (int64_t i = 0; i < hidden; ++i) out[i] = static_cast<T>(acc[i]);
    }
  }
}

}  // namespace

void embedding_fwd(const Tensor& table, const Tensor& ids, const Tensor& y, const EmbeddingOptions& options) {
  const char* kernel = "embedding_fwd";
  const int64_t hidden = check_shapes(kernel, "table", table, ids, "y", y);
  const std::vector<int64_t> rows = table_rows(kernel, ids, table.dim(0), options);
  cpu::visit_floating(table, [&](auto* pt) {
    using T = std::remove_pointer_t<decltype(pt)>;
    gather<T>(pt, rows, hidden, y.data<T>());
  });
}

void embedding_bwd(const Tensor& ids, const Tensor& dy, const Tensor& dtable, const EmbeddingOptions& options) {
  const char* kernel = "embedding_bwd";
  const int64_t hidden = check_shapes(kernel, "dtable", dtable, ids, "dy", dy);
  std::vector<int64_t> rows = table_rows(kernel, ids, dtable.dim(0), options);
  if (options.padding_id >= 0) {
    cpu::visit_index(kernel, "ids", ids, [&](const auto* id) {
      for (int64_t t = 0; t < ids.numel(); ++t) {
        if (static_cast<int64_t>(id[t]) == options.padding_id) rows[t] = kNoRow;
      }
    });
  }
  cpu::visit_floating(dtable, [&](auto* pdt) {
    using T = std::remove_pointer_t<decltype(pdt)>;
    scatter_add<T>(dy.data<T>(), rows, dtable.dim(0), hidden, pdt);
  });
}

}  // namespace hspmd::kernels
