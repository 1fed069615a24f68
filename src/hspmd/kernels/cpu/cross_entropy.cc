// Token-level cross-entropy on the CPU (spec in kernels/cross_entropy.h). Each row subtracts its
// max before exponentiating (logits of 1e4 stay finite) and sums the exponentials in double, so the
// loss keeps full accuracy for vocabularies of 1e5+ entries. Targets are validated in one serial
// pass before any output is written; rows then run in parallel.
// Leading dims of logits flatten into T (logits [B, S, V] with targets [B, S] works too).
#include "hspmd/kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>

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

// Every target is in [0, V) or ignore_index; the message names the first bad token.
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

template <typename T, typename I>
void fwd_rows(const T* logits, const I* targets, int64_t ignore_index, T* losses, T* lse, RowsShape s) {
#pragma omp parallel for schedule(static) if (s.rows * s.vocab >= kParallelThreshold)
  for (int64_t t = 0; t < s.rows; ++t) {
    const T* row = logits + t * s.vocab;
    const T max = *std::max_element(row, row + s.vocab);
    double sum = 0;
    for (int64_t j = 0; j < s.vocab; ++j) sum += std::exp(row[j] - max);
    const double log_sum = std::log(sum);
    lse[t] = static_cast<T>(max + log_sum);
    // loss = lse - logit[target], grouped as (max - logit[target]) + log_sum: both terms are small,
    // so the magnitude of the logits (e.g. 1e4) costs no precision in the loss.
    const auto target = static_cast<int64_t>(targets[t]);
    losses[t] = target == ignore_index ? T(0) : static_cast<T>((static_cast<double>(max) - row[target]) + log_sum);
  }
}

template <typename T, typename I>
void bwd_rows(const T* logits, const I* targets, int64_t ignore_index, const T* lse, const T* dlosses, T* dlogits,
              RowsShape s) {
#pragma omp parallel for schedule(static) if (s.rows * s.vocab >= kParallelThreshold)
  for (int64_t t = 0; t < s.rows; ++t) {
    const T* row = logits + t * s.vocab;
    T* out = dlogits + t * s.vocab;
    const auto target = static_cast<int64_t>(targets[t]);
    if (target == ignore_index) {
      std::fill(out, out + s.vocab, T(0));
      continue;
    }
    const T dl = dlosses[t];
    for (int64_t j = 0; j < s.vocab; ++j) out[j] = dl * std::exp(row[j] - lse[t]);
    out[target] -= dl;
  }
}

}  // namespace

void cross_entropy_fwd(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse,
                       const CrossEntropyOptions& options) {
  const char* kernel = "cross_entropy_fwd";
  const RowsShape s = check_logits(kernel, logits, targets);
  check_per_row(kernel, logits, "losses", losses, s.rows);
  check_per_row(kernel, logits, "lse", lse, s.rows);
  check_targets(kernel, targets, s.vocab, options);
  cpu::visit_floating(logits, [&](auto* pl) {
    using T = std::remove_pointer_t<decltype(pl)>;
    cpu::visit_index(kernel, "targets", targets, [&](const auto* pt) {
      fwd_rows<T>(pl, pt, options.ignore_index, losses.data<T>(), lse.data<T>(), s);
    });
  });
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
  check_targets(kernel, targets, s.vocab, options);
  cpu::visit_floating(logits, [&](auto* pl) {
    using T = std::remove_pointer_t<decltype(pl)>;
    cpu::visit_index(kernel, "targets", targets, [&](const auto* pt) {
      bwd_rows<T>(pl, pt, options.ignore_index, lse.data<T>(), dlosses.data<T>(), dlogits.data<T>(), s);
    });
  });
}

}  // namespace hspmd::kernels
