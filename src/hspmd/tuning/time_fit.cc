#include "hspmd/tuning/time_fit.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "hspmd/core/error.h"

namespace hspmd::tuning {

using planner::LayerTimeFit;
using planner::LinearFit;

namespace {

// Solves the n x n system m x = y (Gaussian elimination with partial pivoting); none when m is
// singular (the samples do not determine the coefficients).
std::optional<std::vector<double>> solve_linear(std::vector<std::vector<double>> m, std::vector<double> y) {
  const size_t n = y.size();
  for (size_t c = 0; c < n; ++c) {
    size_t pivot = c;
    for (size_t r = c + 1; r < n; ++r) {
      if (std::abs(m[r][c]) > std::abs(m[pivot][c])) pivot = r;
    }
    std::swap(m[c], m[pivot]);
    std::swap(y[c], y[pivot]);
    if (!(std::abs(m[c][c]) > 1e-300)) return std::nullopt;
    for (size_t r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = m[r][c] / m[c][c];
      for (size_t k = c; k < n; ++k) m[r][k] -= f * m[c][k];
      y[r] -= f * y[c];
    }
  }
  for (size_t c = 0; c < n; ++c) y[c] /= m[c][c];
  return y;
}

// Least squares of y = sum_k x_k * features_k; none when the samples do not determine them.
std::optional<std::vector<double>> least_squares(const std::vector<std::vector<double>>& features,
                                                 const std::vector<double>& y) {
  const size_t k = features.front().size();
  std::vector<std::vector<double>> ata(k, std::vector<double>(k, 0));
  std::vector<double> aty(k, 0);
  for (size_t i = 0; i < y.size(); ++i) {
    for (size_t a = 0; a < k; ++a) {
      aty[a] += features[i][a] * y[i];
      for (size_t b = 0; b < k; ++b) ata[a][b] += features[i][a] * features[i][b];
    }
  }
  return solve_linear(ata, aty);
}

// Non-negative least squares by trying every subset of the coefficients (there are at most 3):
// the best residual among the subsets whose unconstrained fit is non-negative.
std::vector<double> non_negative_fit(const std::vector<std::vector<double>>& features, const std::vector<double>& y) {
  const size_t k = features.front().size();
  std::vector<double> best(k, 0);
  double best_residual = 0;
  for (double v : y) best_residual += v * v;  // all coefficients zero
  for (unsigned mask = 1; mask < (1u << k); ++mask) {
    std::vector<std::vector<double>> f;
    for (const auto& row : features) {
      std::vector<double> r;
      for (size_t c = 0; c < k; ++c) {
        if (mask & (1u << c)) r.push_back(row[c]);
      }
      f.push_back(r);
    }
    if (f.front().size() > y.size()) continue;
    const std::optional<std::vector<double>> x = least_squares(f, y);
    if (!x) continue;  // these samples do not determine this subset
    if (std::any_of(x->begin(), x->end(), [](double v) { return v < 0; })) continue;
    std::vector<double> full(k, 0);
    for (size_t c = 0, i = 0; c < k; ++c) {
      if (mask & (1u << c)) full[c] = (*x)[i++];
    }
    double residual = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      double fit = 0;
      for (size_t c = 0; c < k; ++c) fit += full[c] * features[i][c];
      residual += (fit - y[i]) * (fit - y[i]);
    }
    if (residual < best_residual) {
      best_residual = residual;
      best = full;
    }
  }
  return best;
}

}  // namespace

LayerTimeFit fit_layer_time(const std::vector<TimeSample>& samples) {
  HSPMD_CHECK(samples.size() >= 3) << "profile fit: need at least 3 samples, got " << samples.size();
  std::vector<std::vector<double>> f;
  std::vector<double> y;
  for (const TimeSample& s : samples) {
    f.push_back({s.micro_batch_size * s.seq_len * s.seq_len, s.micro_batch_size * s.seq_len, 1.0});
    y.push_back(s.seconds);
  }
  const std::vector<double> x = non_negative_fit(f, y);
  return {x[0], x[1], x[2]};
}

LinearFit fit_linear(const std::vector<std::pair<double, double>>& tokens_seconds) {
  HSPMD_CHECK(tokens_seconds.size() >= 2) << "profile fit: need at least 2 samples";
  std::vector<std::vector<double>> f;
  std::vector<double> y;
  for (const auto& [tokens, seconds] : tokens_seconds) {
    f.push_back({tokens, 1.0});
    y.push_back(seconds);
  }
  const std::vector<double> x = non_negative_fit(f, y);
  return {x[0], x[1]};
}

}  // namespace hspmd::tuning
