// lm_head_loss_stats / lm_head_loss_bwd (kernels/lm_head_loss.h) on the CPU: a loop over chunks of
// tokens; each chunk's products are GEMMs of the project's backend (cpu/blas.h) on slices of x and
// dx addressed in place, and its cross-entropy is the cross_entropy kernels on the chunk's logits.
#include "hspmd/kernels/lm_head_loss.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "hspmd/kernels/bf16_rounding.h"
#include "hspmd/kernels/cpu/blas.h"
#include "hspmd/kernels/cpu/typed_visit.h"

namespace hspmd::kernels {
namespace {

// Chunks of about this many bytes of float32 logits: large enough that the products stay efficient
// (dw's product reads and writes all of dw once per chunk; dx's has only the chunk's rows), small
// enough to stay far below the whole logits of a long batch (the chunk sizes measured:
// docs/cpu-kernels.md, "The lm head and its loss, fused").
constexpr int64_t kChunkBytes = int64_t{64} << 20;
constexpr int64_t kMinChunkRows = 128;

struct HeadShape {
  int64_t tokens;  // T
  int64_t hidden;  // H
  int64_t vocab;   // V: this shard's rows of w
};

HeadShape check_head(const char* kernel, const Tensor& x, const Tensor& w, const Tensor& targets,
                     const LmHeadLossOptions& o) {
  cpu::check_floating(kernel, "x", x);
  cpu::check_same_dtype(kernel, "x", x, "w", w);
  HSPMD_CHECK(x.rank() == 2 && w.rank() == 2 && w.dim(1) == x.dim(1))
      << kernel << ": x " << x.to_string() << " and w " << w.to_string() << " must be [T, H] and [V, H]";
  HSPMD_CHECK(w.dim(0) > 0) << kernel << ": w " << w.to_string() << " holds no vocabulary row";
  cpu::check_defined(kernel, "targets", targets);
  HSPMD_CHECK(targets.numel() == x.dim(0)) << kernel << ": targets " << targets.to_string()
                                           << " must hold one target per row of x " << x.to_string();
  HSPMD_CHECK(!o.bf16_operands || x.dtype() == DType::kFloat32)
      << kernel << ": bf16 operands are rounded from float32, x is " << x.to_string();
  HSPMD_CHECK(o.chunk_rows >= 0) << kernel << ": chunk_rows must be >= 0, got " << o.chunk_rows;
  // Here rather than per chunk, so that an error gives the token's position in the whole batch.
  check_cross_entropy_targets(kernel, targets, w.dim(0), o.loss);
  return {x.dim(0), x.dim(1), w.dim(0)};
}

// What the products multiply. Plain runs use x and w themselves (In = T, float or double). bf16
// operands are copies made once per call: bf16 storage for oneDNN's bf16 GEMM, or float32 values
// rounded to bf16 for the float32 GEMM (docs/mixed-precision.md); like matmul's, these copies are
// the kernel's scratch, outside the allocator.
template <typename In>
struct Operands {
  const In* x = nullptr;  // [T, H]
  const In* w = nullptr;  // [V, H]
  std::vector<In> x_copy, w_copy;
  bool bf16 = false;

  Operands(const Tensor& xt, const Tensor& wt, bool bf16_operands) : bf16(bf16_operands) {
    if constexpr (!std::is_same_v<In, double>) {
      if (bf16) {
        x = copy(xt, x_copy);
        w = copy(wt, w_copy);
        return;
      }
    }
    x = xt.data<In>();
    w = wt.data<In>();
  }
  static const In* copy(const Tensor& t, std::vector<In>& out) {
    out.resize(static_cast<size_t>(t.numel()));
    if constexpr (std::is_same_v<In, BFloat16>) {
      to_bfloat16(t.data<float>(), out.data(), t.numel());
    } else {
      round_to_bfloat16(t.data<float>(), out.data(), t.numel());
    }
    return out.data();
  }
  // The chunk's dlogits as a product operand: itself, rounded in place, or a bf16 copy.
  const In* operand(float* dlogits, int64_t n, std::vector<In>& scratch) const {
    if constexpr (std::is_same_v<In, BFloat16>) {
      scratch.resize(static_cast<size_t>(n));
      to_bfloat16(dlogits, scratch.data(), n);
      return scratch.data();
    } else {
      if (bf16) round_to_bfloat16(dlogits, dlogits, n);
      return dlogits;
    }
  }
  const double* operand(double* dlogits, int64_t, std::vector<In>&) const { return dlogits; }
};

// The result type of products of In: float for float and bf16 operands.
template <typename In>
using ResultOf = std::conditional_t<std::is_same_v<In, double>, double, float>;

// logits[C, V] = x[r0 : r0 + C] @ w^T
template <typename In, typename T>
void chunk_logits(const Operands<In>& op, const HeadShape& s, int64_t r0, int64_t c, T* logits) {
  cpu::gemm(false, true, c, s.vocab, s.hidden, T(1), op.x + r0 * s.hidden, s.hidden, op.w, s.hidden, T(0), logits,
            s.vocab);
}

template <typename In>
void stats_chunks(const Operands<In>& op, const HeadShape& s, const Tensor& targets, const Tensor& stats,
                  const LmHeadLossOptions& o) {
  using T = ResultOf<In>;
  const int64_t rows = lm_head_loss_chunk_rows(s.tokens, s.vocab, o);
  Tensor logits = Tensor::empty({rows, s.vocab}, dtype_of<T>(), o.allocator);
  Tensor chunk_stats = Tensor::empty({3 * rows}, DType::kFloat64, o.allocator);
  double* out = stats.data<double>();
  for (int64_t r0 = 0; r0 < s.tokens; r0 += rows) {
    const int64_t c = std::min(rows, s.tokens - r0);
    Tensor l = logits.narrow(0, 0, c);
    chunk_logits(op, s, r0, c, l.data<T>());
    Tensor st = chunk_stats.narrow(0, 0, 3 * c).reshape({3, c});
    cross_entropy_shard_stats(l, targets.narrow(0, r0, c), st, o.loss);
    for (int64_t k = 0; k < 3; ++k) std::memcpy(out + k * s.tokens + r0, st.data<double>() + k * c, c * sizeof(double));
  }
}

template <typename In>
void backward_chunks(const Operands<In>& op, const HeadShape& s, const Tensor& targets, const Tensor& lse,
                     const Tensor& dlosses, const Tensor& dx, const Tensor& dw, const LmHeadLossOptions& o) {
  using T = ResultOf<In>;
  const int64_t rows = lm_head_loss_chunk_rows(s.tokens, s.vocab, o);
  Tensor logits = Tensor::empty({rows, s.vocab}, dtype_of<T>(), o.allocator);
  std::vector<In> dlogits_copy;
  for (int64_t r0 = 0; r0 < s.tokens; r0 += rows) {
    const int64_t c = std::min(rows, s.tokens - r0);
    Tensor l = logits.narrow(0, 0, c);
    chunk_logits(op, s, r0, c, l.data<T>());
    // dlogits overwrite the logits (the kernel reads each element before writing it).
    cross_entropy_bwd(l, targets.narrow(0, r0, c), lse.narrow(0, r0, c), dlosses.narrow(0, r0, c), l, o.loss);
    const In* dl = op.operand(l.data<T>(), c * s.vocab, dlogits_copy);
    // dx[r0 : r0 + C] = dlogits @ w;  dw (+)= dlogits^T @ x[r0 : r0 + C]
    cpu::gemm(false, false, c, s.hidden, s.vocab, T(1), dl, s.vocab, op.w, s.hidden, T(0),
              dx.data<T>() + r0 * s.hidden, s.hidden);
    cpu::gemm(true, false, s.vocab, s.hidden, c, T(1), dl, s.vocab, op.x + r0 * s.hidden, s.hidden,
              r0 == 0 ? T(0) : T(1), dw.data<T>(), s.hidden);
  }
}

// f(operands) with the operand type the dtype and options call for.
template <typename F>
void with_operands(const Tensor& x, const Tensor& w, bool bf16, F&& f) {
  if (x.dtype() == DType::kFloat64) return f(Operands<double>(x, w, false));
  if (bf16 && bf16_gemm() == Bf16Gemm::kOneDnn) return f(Operands<BFloat16>(x, w, true));
  f(Operands<float>(x, w, bf16));
}

}  // namespace

int64_t lm_head_loss_chunk_rows(int64_t tokens, int64_t vocab, const LmHeadLossOptions& options) {
  const int64_t rows = options.chunk_rows > 0 ? options.chunk_rows
                                              : std::max(kMinChunkRows, kChunkBytes / (4 * std::max<int64_t>(vocab, 1)));
  return std::min(rows, tokens);
}

void lm_head_loss_stats(const Tensor& x, const Tensor& w, const Tensor& targets, const Tensor& stats,
                        const LmHeadLossOptions& options) {
  const char* kernel = "lm_head_loss_stats";
  const HeadShape s = check_head(kernel, x, w, targets, options);
  HSPMD_CHECK(stats.defined() && stats.dtype() == DType::kFloat64 && stats.numel() == 3 * s.tokens)
      << kernel << ": stats " << (stats.defined() ? stats.to_string() : "undefined") << " must be float64 [3, "
      << s.tokens << "]";
  if (s.tokens == 0) return;
  with_operands(x, w, options.bf16_operands,
                [&](const auto& op) { stats_chunks(op, s, targets, stats, options); });
}

void lm_head_loss_bwd(const Tensor& x, const Tensor& w, const Tensor& targets, const Tensor& lse,
                      const Tensor& dlosses, const Tensor& dx, const Tensor& dw, const LmHeadLossOptions& options) {
  const char* kernel = "lm_head_loss_bwd";
  const HeadShape s = check_head(kernel, x, w, targets, options);
  cpu::check_defined(kernel, "dx", dx);
  cpu::check_defined(kernel, "dw", dw);
  HSPMD_CHECK(dx.shape() == x.shape() && dx.dtype() == x.dtype() && dw.shape() == w.shape() && dw.dtype() == w.dtype())
      << kernel << ": dx " << dx.to_string() << " and dw " << dw.to_string() << " must be like x " << x.to_string()
      << " and w " << w.to_string();
  if (s.tokens == 0) {  // no token: no gradient
    Tensor(dw).fill(0.0);
    return;
  }
  with_operands(x, w, options.bf16_operands,
                [&](const auto& op) { backward_chunks(op, s, targets, lse, dlosses, dx, dw, options); });
}

}  // namespace hspmd::kernels
