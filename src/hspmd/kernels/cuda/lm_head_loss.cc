#include "hspmd/kernels/cuda/lm_head_loss.h"

#include <algorithm>

#include "hspmd/core/error.h"
#include "hspmd/kernels/cuda/cross_entropy.h"
#include "hspmd/kernels/cuda/elementwise.h"

namespace hspmd::kernels::cuda {

namespace {

int64_t chunk_rows(const char* kernel, DType dtype, const LmHeadLossShape& s) {
  HSPMD_CHECK(dtype == DType::kFloat32 || dtype == DType::kBFloat16)
      << kernel << ": x and w must be float32 or bfloat16, got " << dtype_name(dtype);
  HSPMD_CHECK(s.tokens >= 0 && s.hidden > 0 && s.vocab > 0 && s.chunk_rows >= 0)
      << kernel << ": need tokens >= 0, hidden > 0, vocab > 0, chunk_rows >= 0; got " << s.tokens << ", " << s.hidden
      << ", " << s.vocab << ", " << s.chunk_rows;
  if (s.chunk_rows > 0) return std::min(s.chunk_rows, std::max<int64_t>(s.tokens, 1));
  const int64_t rows = (int64_t{256} << 20) / (s.vocab * static_cast<int64_t>(sizeof(float)));
  return std::clamp<int64_t>(rows, 1, std::max<int64_t>(s.tokens, 1));
}

// logits [rows, V] float32 = x[first : first + rows] @ w^T.
void chunk_logits(const LmHeadLossContext& ctx, DType dtype, const void* x, const void* w, int64_t first, int64_t rows,
                  const LmHeadLossShape& s, float* logits) {
  GemmArgs g;
  g.a = static_cast<const char*>(x) + first * s.hidden * static_cast<int64_t>(dtype_size(dtype));
  g.b = w;
  g.out = logits;
  g.operands = dtype;
  g.out_dtype = DType::kFloat32;
  g.m = rows;
  g.n = s.vocab;
  g.k = s.hidden;
  g.trans_b = true;
  ctx.gemm.run(g, ctx.stream);
}

const void* offset(const void* p, int64_t elements, DType dtype) {
  return static_cast<const char*>(p) + elements * static_cast<int64_t>(dtype_size(dtype));
}

CrossEntropyShape chunk_shape(const LmHeadLossShape& s, int64_t rows) {
  return {.tokens = rows, .vocab = s.vocab, .ignore_index = s.ignore_index, .softcap = s.softcap,
          .vocab_start = s.vocab_start, .vocab_size = s.vocab_size};
}

// Runs per_chunk(first row, rows, logits) over the tokens a chunk at a time, each chunk's float32 logits
// computed into one reused buffer: the whole [tokens, vocab] logits never exist at once.
template <typename PerChunk>
void over_logit_chunks(const char* what, const LmHeadLossContext& ctx, DType dtype, const void* x, const void* w,
                       const LmHeadLossShape& s, const PerChunk& per_chunk) {
  const int64_t chunk = chunk_rows(what, dtype, s);
  if (s.tokens == 0) return;
  hspmd::cuda::DeviceBuffer logits(ctx.memory, static_cast<size_t>(chunk * s.vocab) * sizeof(float), ctx.stream);
  for (int64_t first = 0; first < s.tokens; first += chunk) {
    const int64_t rows = std::min(chunk, s.tokens - first);
    chunk_logits(ctx, dtype, x, w, first, rows, s, logits.as<float>());
    per_chunk(first, rows, logits.data());
  }
}

}  // namespace

void lm_head_loss_fwd(const LmHeadLossContext& ctx, DType dtype, const void* x, const void* w, DType targets_dtype,
                      const void* targets, float* losses, float* lse, const LmHeadLossShape& s) {
  over_logit_chunks("cuda lm_head_loss_fwd", ctx, dtype, x, w, s, [&](int64_t first, int64_t rows, const void* logits) {
    cross_entropy_fwd(DType::kFloat32, logits, targets_dtype, offset(targets, first, targets_dtype), losses + first,
                      lse + first, chunk_shape(s, rows), ctx.stream);
  });
}

void lm_head_loss_stats(const LmHeadLossContext& ctx, DType dtype, const void* x, const void* w, DType targets_dtype,
                        const void* targets, double* stats, const LmHeadLossShape& s) {
  over_logit_chunks("cuda lm_head_loss_stats", ctx, dtype, x, w, s, [&](int64_t first, int64_t rows, const void* logits) {
    cross_entropy_shard_stats(DType::kFloat32, logits, targets_dtype, offset(targets, first, targets_dtype),
                              stats + first, s.tokens, chunk_shape(s, rows), ctx.stream);
  });
}

void lm_head_loss_bwd(const LmHeadLossContext& ctx, DType dtype, const void* x, const void* w, DType targets_dtype,
                      const void* targets, const float* lse, const float* dlosses, float* dx, float* dw,
                      const LmHeadLossShape& s) {
  const int64_t chunk = chunk_rows("cuda lm_head_loss_bwd", dtype, s);
  const bool bf16 = dtype == DType::kBFloat16;
  if (s.tokens == 0) {
    const cudaError_t cleared =
        cudaMemsetAsync(dw, 0, static_cast<size_t>(s.vocab * s.hidden) * sizeof(float), ctx.stream);
    HSPMD_CHECK(cleared == cudaSuccess) << "cuda lm_head_loss_bwd: clearing dw failed: " << cudaGetErrorString(cleared);
    return;
  }
  hspmd::cuda::DeviceBuffer logits(ctx.memory, static_cast<size_t>(chunk * s.vocab) * sizeof(float), ctx.stream);
  hspmd::cuda::DeviceBuffer rounded;  // dlogits as bf16 operands
  if (bf16) rounded = hspmd::cuda::DeviceBuffer(ctx.memory, static_cast<size_t>(chunk * s.vocab) * 2, ctx.stream);
  for (int64_t first = 0; first < s.tokens; first += chunk) {
    const int64_t rows = std::min(chunk, s.tokens - first);
    chunk_logits(ctx, dtype, x, w, first, rows, s, logits.as<float>());
    cross_entropy_bwd(DType::kFloat32, logits.data(), targets_dtype, offset(targets, first, targets_dtype), lse + first,
                      dlosses + first, logits.data(), chunk_shape(s, rows), ctx.stream);
    const void* dlogits = logits.data();
    if (bf16) {
      cast(DType::kFloat32, logits.data(), DType::kBFloat16, rounded.data(), rows * s.vocab, ctx.stream);
      dlogits = rounded.data();
    }
    // dx_c [rows, H] = dlogits [rows, V] @ w [V, H]
    GemmArgs g;
    g.a = dlogits;
    g.b = w;
    g.out = dx + first * s.hidden;
    g.operands = dtype;
    g.m = rows;
    g.n = s.hidden;
    g.k = s.vocab;
    ctx.gemm.run(g, ctx.stream);
    // dw [V, H] (+)= dlogits^T [V, rows] @ x_c [rows, H]
    g.a = dlogits;
    g.b = offset(x, first * s.hidden, dtype);
    g.out = dw;
    g.m = s.vocab;
    g.n = s.hidden;
    g.k = rows;
    g.trans_a = true;
    g.beta = first == 0 ? 0.0f : 1.0f;
    ctx.gemm.run(g, ctx.stream);
  }
}

}  // namespace hspmd::kernels::cuda
