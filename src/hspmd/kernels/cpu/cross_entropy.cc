// Token-level cross-entropy on the CPU (spec in kernels/cross_entropy.h). Each row subtracts its
// max before exponentiating (logits of 1e4 stay finite) and sums the exponentials in double, so the
// loss keeps full accuracy for vocabularies of 1e5+ entries. Targets are validated in one serial
// pass before any output is written; rows then run in parallel.
// Leading dims of logits flatten into T (logits [B, S, V] with targets [B, S] works too).
// Soft-capping (options.softcap) caps a copy of each row in the thread's scratch, so the logits stay
// const and the backward may still write dlogits over them.
#include "hspmd/kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "hspmd/kernels/cpu/simd/row_ops.h"
#include "hspmd/kernels/cpu/typed_visit.h"

namespace hspmd::kernels {
namespace {

using cpu::kParallelThreshold;

struct RowsShape {
  int64_t rows;   // T
  int64_t vocab;  // V
};

RowsShape check_logits(const char* kernel, const Tensor& logits, const Tensor& targets) {
  cpu::check_floating(kernel, "logits", logits);
  HSPMD_CHECK(logits.rank() >= 1 && logits.dim(-1) > 0)
      << kernel << ": logits " << logits.to_string() << " needs a non-empty last (vocab) dim";
  const RowsShape s{logits.numel() / logits.dim(-1), logits.dim(-1)};
  cpu::check_defined(kernel, "targets", targets);
  HSPMD_CHECK(targets.numel() == s.rows) << kernel << ": targets " << targets.to_string()
                                         << " must hold one target per row of logits " << logits.to_string();
  return s;
}

// One value per row, dtype of logits (losses, lse, dlosses).
void check_per_row(const char* kernel, const Tensor& logits, const char* name, const Tensor& t, int64_t rows) {
  cpu::check_same_dtype(kernel, "logits", logits, name, t);
  HSPMD_CHECK(t.numel() == rows) << kernel << ": " << name << " " << t.to_string()
                                 << " must hold one value per row of logits " << logits.to_string();
}

// The row's whole width: the shard's own unless the options say it is one shard of a wider row.
int64_t row_width(const char* kernel, RowsShape s, const CrossEntropyOptions& options) {
  if (options.vocab_size == 0 && options.vocab_start == 0) return s.vocab;
  HSPMD_CHECK(options.vocab_start >= 0 && options.vocab_start + s.vocab <= options.vocab_size)
      << kernel << ": a shard of " << s.vocab << " columns from " << options.vocab_start
      << " does not fit a vocabulary of " << options.vocab_size;
  return options.vocab_size;
}

// Every target is in [0, vocab) or ignore_index; the message names the first bad token.
void check_targets(const char* kernel, const Tensor& targets, int64_t vocab, const CrossEntropyOptions& options) {
  cpu::visit_index(kernel, "targets", targets, [&](const auto* target) {
    for (int64_t t = 0; t < targets.numel(); ++t) {
      const auto v = static_cast<int64_t>(target[t]);
      HSPMD_CHECK(v == options.ignore_index || (v >= 0 && v < vocab))
          << kernel << ": target " << v << " at position " << t << " of targets " << targets.to_string()
          << " is outside the vocabulary [0, " << vocab << ") and is not ignore_index " << options.ignore_index;
    }
  });
}

// The target's column in this shard, or -1 when it is ignored or held by another shard.
template <typename I>
int64_t local_target(I target, RowsShape s, const CrossEntropyOptions& options) {
  const auto v = static_cast<int64_t>(target);
  if (v == options.ignore_index) return -1;
  const int64_t j = v - options.vocab_start;
  return j >= 0 && j < s.vocab ? j : -1;
}

void check_softcap(const char* kernel, const CrossEntropyOptions& options) {
  HSPMD_CHECK(options.softcap >= 0 && std::isfinite(options.softcap))
      << kernel << ": softcap " << options.softcap << " must be finite and >= 0 (0: no capping)";
}

// The row as the loss sees it: the logits themselves, or softcap * tanh(logits / softcap) in `capped`.
template <typename T>
const T* loss_row(const T* row, int64_t n, double softcap, std::vector<T>& capped) {
  if (softcap == 0.0) return row;
  capped.assign(row, row + n);
  if constexpr (std::is_same_v<T, float>) {
    cpu::row_ops().softcap(capped.data(), n, static_cast<float>(softcap));
  } else {
    for (T& v : capped) v = static_cast<T>(softcap * std::tanh(v / softcap));
  }
  return capped.data();
}

// d capped / d logit = 1 - tanh^2 = 1 - (capped / softcap)^2: out[j] *= that.
template <typename T>
void softcap_grad(const T* capped, int64_t n, double softcap, T* out) {
  const T inv = static_cast<T>(1.0 / softcap);
  for (int64_t j = 0; j < n; ++j) {
    const T y = capped[j] * inv;
    out[j] *= T(1) - y * y;
  }
}

template <typename T, typename I>
void stats_rows(const T* logits, const I* targets, const CrossEntropyOptions& options, double* stats, RowsShape s) {
  double* maxes = stats;
  double* sums = stats + s.rows;
  double* target_logits = stats + 2 * s.rows;
#pragma omp parallel if (s.rows * s.vocab >= kParallelThreshold)
  {
    std::vector<T> capped;  // this thread's soft-capped row
#pragma omp for schedule(static)
    for (int64_t t = 0; t < s.rows; ++t) {
      const T* row = loss_row(logits + t * s.vocab, s.vocab, options.softcap, capped);
      T max;
      double sum = 0;
      if constexpr (std::is_same_v<T, float>) {  // the SIMD row loops (cpu/simd/row_ops.h)
        const cpu::RowOps& ops = cpu::row_ops();
        max = ops.row_max(row, s.vocab);
        sum = ops.exp_shift_sum_f64(row, s.vocab, max);
      } else {
        max = *std::max_element(row, row + s.vocab);
        for (int64_t j = 0; j < s.vocab; ++j) sum += std::exp(row[j] - max);
      }
      const int64_t j = local_target(targets[t], s, options);
      maxes[t] = max;
      sums[t] = sum;
      target_logits[t] = j < 0 ? 0.0 : static_cast<double>(row[j]);
    }
  }
}

// all: [k][3][T] float64.
template <typename T, typename I>
void combine_rows(const double* all, int64_t k, const I* targets, int64_t ignore_index, T* losses, T* lse,
                  int64_t rows) {
  for (int64_t t = 0; t < rows; ++t) {
    double max = all[t];
    for (int64_t i = 1; i < k; ++i) max = std::max(max, all[i * 3 * rows + t]);
    double sum = 0, target_logit = 0;
    for (int64_t i = 0; i < k; ++i) {
      const double* shard = all + i * 3 * rows;
      sum += shard[rows + t] * std::exp(shard[t] - max);
      target_logit += shard[2 * rows + t];  // only the target's shard contributes
    }
    const double log_sum = std::log(sum);
    lse[t] = static_cast<T>(max + log_sum);
    // loss = lse - logit[target], grouped as (max - logit[target]) + log_sum: both terms are small,
    // so the magnitude of the logits (e.g. 1e4) costs no precision in the loss.
    losses[t] = static_cast<int64_t>(targets[t]) == ignore_index ? T(0) : static_cast<T>((max - target_logit) + log_sum);
  }
}

template <typename T, typename I>
void bwd_rows(const T* logits, const I* targets, const CrossEntropyOptions& options, const T* lse, const T* dlosses,
              T* dlogits, RowsShape s) {
#pragma omp parallel if (s.rows * s.vocab >= kParallelThreshold)
  {
    std::vector<T> capped;  // this thread's soft-capped row
#pragma omp for schedule(static)
    for (int64_t t = 0; t < s.rows; ++t) {
      T* out = dlogits + t * s.vocab;
      if (static_cast<int64_t>(targets[t]) == options.ignore_index) {
        std::fill(out, out + s.vocab, T(0));
        continue;
      }
      const T* row = loss_row(logits + t * s.vocab, s.vocab, options.softcap, capped);
      const T dl = dlosses[t];
      if constexpr (std::is_same_v<T, float>) {
        cpu::row_ops().exp_shift_scale(row, s.vocab, lse[t], dl, out);
      } else {
        for (int64_t j = 0; j < s.vocab; ++j) out[j] = dl * std::exp(row[j] - lse[t]);
      }
      const int64_t j = local_target(targets[t], s, options);
      if (j >= 0) out[j] -= dl;
      if (options.softcap != 0.0) softcap_grad(row, s.vocab, options.softcap, out);
    }
  }
}

}  // namespace

namespace {
// The public kernels below, named `kernel` in their errors (cross_entropy_fwd runs both).
void shard_stats(const char* kernel, const Tensor& logits, const Tensor& targets, const Tensor& stats,
                 const CrossEntropyOptions& options) {
  const RowsShape s = check_logits(kernel, logits, targets);
  HSPMD_CHECK(stats.defined() && stats.dtype() == DType::kFloat64 && stats.numel() == 3 * s.rows)
      << kernel << ": stats " << stats.to_string() << " must be float64 [3, " << s.rows << "]";
  check_softcap(kernel, options);
  check_targets(kernel, targets, row_width(kernel, s, options), options);
  cpu::visit_floating(logits, [&](auto* pl) {
    cpu::visit_index(kernel, "targets", targets,
                     [&](const auto* pt) { stats_rows(pl, pt, options, stats.data<double>(), s); });
  });
}

void combine(const char* kernel, const Tensor& all_stats, const Tensor& targets, const Tensor& losses,
             const Tensor& lse, const CrossEntropyOptions& options) {
  const int64_t rows = targets.numel();
  HSPMD_CHECK(all_stats.defined() && all_stats.dtype() == DType::kFloat64 &&
              (rows == 0 ? all_stats.numel() == 0 : all_stats.numel() > 0 && all_stats.numel() % (3 * rows) == 0))
      << kernel << ": stats " << all_stats.to_string() << " must be float64 [k, 3, " << rows << "]";
  cpu::check_floating(kernel, "losses", losses);
  check_per_row(kernel, losses, "lse", lse, rows);
  HSPMD_CHECK(losses.numel() == rows) << kernel << ": losses " << losses.to_string() << " must hold " << rows << " values";
  if (rows == 0) return;
  const int64_t k = all_stats.numel() / (3 * rows);
  cpu::visit_floating(losses, [&](auto* pout) {
    using T = std::remove_pointer_t<decltype(pout)>;
    cpu::visit_index(kernel, "targets", targets, [&](const auto* pt) {
      combine_rows<T>(all_stats.data<double>(), k, pt, options.ignore_index, pout, lse.data<T>(), rows);
    });
  });
}

}  // namespace

void check_cross_entropy_targets(const char* kernel, const Tensor& targets, int64_t columns,
                                 const CrossEntropyOptions& options) {
  cpu::check_defined(kernel, "targets", targets);
  check_targets(kernel, targets, row_width(kernel, RowsShape{targets.numel(), columns}, options), options);
}

void cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets, const Tensor& stats,
                               const CrossEntropyOptions& options) {
  shard_stats("cross_entropy_shard_stats", logits, targets, stats, options);
}

void cross_entropy_combine(const Tensor& all_stats, const Tensor& targets, const Tensor& losses, const Tensor& lse,
                           const CrossEntropyOptions& options) {
  combine("cross_entropy_combine", all_stats, targets, losses, lse, options);
}

void cross_entropy_fwd(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse,
                       const CrossEntropyOptions& options) {
  const char* kernel = "cross_entropy_fwd";
  const RowsShape s = check_logits(kernel, logits, targets);
  check_per_row(kernel, logits, "losses", losses, s.rows);
  check_per_row(kernel, logits, "lse", lse, s.rows);
  Tensor stats = Tensor::empty(Shape{3, s.rows}, DType::kFloat64);
  shard_stats(kernel, logits, targets, stats, options);
  combine(kernel, stats, targets, losses, lse, options);
}

void cross_entropy_bwd(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& dlosses,
                       const Tensor& dlogits, const CrossEntropyOptions& options) {
  const char* kernel = "cross_entropy_bwd";
  const RowsShape s = check_logits(kernel, logits, targets);
  check_per_row(kernel, logits, "lse", lse, s.rows);
  check_per_row(kernel, logits, "dlosses", dlosses, s.rows);
  cpu::check_same_dtype(kernel, "logits", logits, "dlogits", dlogits);
  HSPMD_CHECK(dlogits.shape() == logits.shape()) << kernel << ": dlogits " << dlogits.to_string()
                                                 << " must be shaped like logits " << logits.to_string();
  check_softcap(kernel, options);
  check_targets(kernel, targets, row_width(kernel, s, options), options);
  cpu::visit_floating(logits, [&](auto* pl) {
    using T = std::remove_pointer_t<decltype(pl)>;
    cpu::visit_index(kernel, "targets", targets, [&](const auto* pt) {
      bwd_rows<T>(pl, pt, options, lse.data<T>(), dlosses.data<T>(), dlogits.data<T>(), s);
    });
  });
}

}  // namespace hspmd::kernels
