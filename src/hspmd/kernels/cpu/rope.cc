// Rotary position embedding on the CPU (spec in kernels/rope.h). Frequencies and angles are
// computed in double (positions reach 1e5 and more, where float angles lose whole radians); each
// position's cos/sin row is computed once and shared by every token at that position and its N
// heads. Tokens run in parallel.
#include "hspmd/kernels/rope.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "hspmd/kernels/cpu/typed_visit.h"

namespace hspmd::kernels {
namespace {

using cpu::kParallelThreshold;

struct RopeShape {
  int64_t tokens;  // T
  int64_t heads;   // N
  int64_t dim;     // D (even)
};

RopeShape check_rope(const char* kernel, const char* in_name, const Tensor& in, const Tensor& positions,
                     std::span<const double> inv_freq, const char* out_name, const Tensor& out) {
  cpu::check_floating(kernel, in_name, in);
  HSPMD_CHECK(in.rank() == 3) << kernel << ": " << in_name << " " << in.to_string() << " must be [T, N, D]";
  const RopeShape s{in.dim(0), in.dim(1), in.dim(2)};
  HSPMD_CHECK(s.dim % 2 == 0) << kernel << ": head dim D = " << s.dim << " of " << in_name << " " << in.to_string()
                              << " must be even (rotate-half pairs i with i + D/2)";
  cpu::check_same_dtype(kernel, in_name, in, out_name, out);
  HSPMD_CHECK(out.shape() == in.shape()) << kernel << ": " << out_name << " " << out.to_string()
                                         << " must be shaped like " << in_name << " " << in.to_string();
  cpu::check_defined(kernel, "positions", positions);
  HSPMD_CHECK(positions.numel() == s.tokens) << kernel << ": positions " << positions.to_string()
                                             << " must hold one position per token of " << in_name << " "
                                             << in.to_string();
  HSPMD_CHECK(static_cast<int64_t>(inv_freq.size()) * 2 == s.dim)
      << kernel << ": " << inv_freq.size() << " inverse frequencies for head dim D = " << s.dim << " (need D/2)";
  return s;
}

// cos and sin (times sign) of position * inv_freq[i] for the positions [first, first + rows): the
// rows of a table, so a position shared by many tokens is computed once. Each entry is the same
// double-precision value a per-token computation gives.
template <typename T>
struct AngleTable {
  int64_t first = 0, rows = 0, half = 0;
  std::vector<T> cos, sin;  // [rows, half]

  AngleTable(int64_t first_position, int64_t num_rows, std::span<const double> inv_freq, double sign)
      : first(first_position), rows(num_rows), half(static_cast<int64_t>(inv_freq.size())),
        cos(static_cast<size_t>(rows * half)), sin(static_cast<size_t>(rows * half)) {
#pragma omp parallel for schedule(static) if (rows * half >= 4096)
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(first + r) * inv_freq[i];
        cos[r * half + i] = static_cast<T>(std::cos(angle));
        sin[r * half + i] = static_cast<T>(sign * std::sin(angle));
      }
    }
  }
  const T* cos_of(int64_t position) const { return cos.data() + (position - first) * half; }
  const T* sin_of(int64_t position) const { return sin.data() + (position - first) * half; }
};

// out = rotation of in by sign * angle, pairs (i, i + D/2). in and out may be the same buffer: each
// pair is read before it is written.
template <typename T, typename I>
void rotate(const T* in, const I* positions, std::span<const double> inv_freq, double sign, T* out, RopeShape s) {
  const int64_t half = s.dim / 2;
  if (s.tokens == 0) return;
  // Packed sequences restart at 0, so positions repeat across sequences: the angles come from one
  // table over [min, max] when it has no more rows than there are tokens (a batch of 4 x 512 tokens
  // needs 512 rows, a quarter of the per-token sin/cos work; with 8 heads this was most of the
  // kernel's time).
  const auto [lowest, highest] = std::minmax_element(positions, positions + s.tokens);
  const uint64_t spread = static_cast<uint64_t>(*highest) - static_cast<uint64_t>(*lowest);  // no overflow
  const AngleTable<T> table(*lowest, spread < static_cast<uint64_t>(s.tokens) ? static_cast<int64_t>(spread) + 1 : 0,
                            inv_freq, sign);
#pragma omp parallel if (s.tokens * s.heads * s.dim >= kParallelThreshold)
  {
    std::vector<T> cos_t(table.rows > 0 ? 0 : half), sin_t(table.rows > 0 ? 0 : half);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < s.tokens; ++t) {
      const T *c = cos_t.data(), *sn = sin_t.data();
      if (table.rows > 0) {
        c = table.cos_of(positions[t]);
        sn = table.sin_of(positions[t]);
      } else {
        for (int64_t i = 0; i < half; ++i) {
          const double angle = static_cast<double>(positions[t]) * inv_freq[i];
          cos_t[i] = static_cast<T>(std::cos(angle));
          sin_t[i] = static_cast<T>(sign * std::sin(angle));
        }
      }
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t offset = (t * s.heads + h) * s.dim;
        const T* x = in + offset;
        T* y = out + offset;
        for (int64_t i = 0; i < half; ++i) {
          const T a = x[i], b = x[i + half];
          y[i] = a * c[i] - b * sn[i];
          y[i + half] = b * c[i] + a * sn[i];
        }
      }
    }
  }
}

void rope(const char* kernel, const char* in_name, const Tensor& in, const Tensor& positions,
          std::span<const double> inv_freq, double sign, const char* out_name, const Tensor& out) {
  const RopeShape s = check_rope(kernel, in_name, in, positions, inv_freq, out_name, out);
  cpu::visit_floating(in, [&](auto* pin) {
    using T = std::remove_pointer_t<decltype(pin)>;
    cpu::visit_index(kernel, "positions", positions,
                     [&](const auto* pos) { rotate<T>(pin, pos, inv_freq, sign, out.data<T>(), s); });
  });
}

std::vector<double> default_inv_freq(const char* kernel, const Tensor& x, double theta) {
  HSPMD_CHECK(theta > 0) << kernel << ": theta " << theta << " must be > 0";
  const int64_t dim = x.rank() == 3 ? x.dim(2) : 0, half = dim / 2;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(dim));
  }
  return inv_freq;
}

}  // namespace

void rope_fwd(const Tensor& x, const Tensor& positions, std::span<const double> inv_freq, const Tensor& y) {
  rope("rope_fwd", "x", x, positions, inv_freq, +1.0, "y", y);
}

// The forward is a rotation, so its transpose (the backward) is the rotation by -angle.
void rope_bwd(const Tensor& dy, const Tensor& positions, std::span<const double> inv_freq, const Tensor& dx) {
  rope("rope_bwd", "dy", dy, positions, inv_freq, -1.0, "dx", dx);
}

void rope_fwd(const Tensor& x, const Tensor& positions, double theta, const Tensor& y) {
  rope_fwd(x, positions, default_inv_freq("rope_fwd", x, theta), y);
}

void rope_bwd(const Tensor& dy, const Tensor& positions, double theta, const Tensor& dx) {
  rope_bwd(dy, positions, default_inv_freq("rope_bwd", dy, theta), dx);
}

}  // namespace hspmd::kernels
