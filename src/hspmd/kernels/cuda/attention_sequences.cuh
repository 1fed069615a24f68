// What the CUDA attention kernels (the reference one in attention.cu and the flash one in
// flash_attention.cu) share: the sizes a kernel reads, and which keys a query token sees in packed
// variable-length sequences with an optional sliding window (included by .cu files only).
#pragma once

#include <cmath>
#include <cstdint>

#include "hspmd/kernels/cuda/attention.h"
#include "hspmd/kernels/cuda/device_math.cuh"

namespace hspmd::kernels::cuda::attention_detail {

inline constexpr int kMaxHeadDim = 256;

struct Dims {
  int64_t q_heads, kv_heads, head_dim, sequences;
  float scale;
  int64_t window;  // 0: none
};

// The index s of token t's sequence: the last offset cu_seqlens[s] <= t.
template <typename I>
__device__ int64_t sequence_of(const I* cu_seqlens, int64_t sequences, int64_t t) {
  int64_t lo = 0, hi = sequences;  // cu_seqlens[lo] <= t < cu_seqlens[hi]
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (static_cast<int64_t>(cu_seqlens[mid]) <= t) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// The first key token t attends to: its sequence's first, or the first of its sliding window.
template <typename I>
__device__ int64_t first_key(const I* cu_seqlens, const Dims& d, int64_t t) {
  const int64_t start = static_cast<int64_t>(cu_seqlens[sequence_of(cu_seqlens, d.sequences, t)]);
  return d.window > 0 && t - d.window + 1 > start ? t - d.window + 1 : start;
}

// One past the last query token that attends to key token j: the end of j's sequence, or of the
// window of queries j is in.
template <typename I>
__device__ int64_t last_query_end(const I* cu_seqlens, const Dims& d, int64_t j) {
  const int64_t end = static_cast<int64_t>(cu_seqlens[sequence_of(cu_seqlens, d.sequences, j) + 1]);
  return d.window > 0 && j + d.window < end ? j + d.window : end;
}

inline Dims checked_dims(const char* kernel, DType cu_seqlens_dtype, const AttentionShape& s) {
  HSPMD_CHECK(s.tokens >= 0 && s.tokens <= 0x7fffffff && s.q_heads > 0 && s.q_heads <= 65535 && s.kv_heads > 0 &&
              s.q_heads % s.kv_heads == 0 && s.head_dim > 0 && s.head_dim <= kMaxHeadDim && s.sequences >= 1)
      << kernel << ": need 0 <= tokens < 2^31, 0 < kv_heads dividing q_heads <= 65535, 0 < head_dim <= "
      << kMaxHeadDim << " and sequences >= 1; got tokens " << s.tokens << ", q_heads " << s.q_heads << ", kv_heads "
      << s.kv_heads << ", head_dim " << s.head_dim << ", sequences " << s.sequences;
  HSPMD_CHECK(cu_seqlens_dtype == DType::kInt64 || cu_seqlens_dtype == DType::kInt32)
      << kernel << ": cu_seqlens must be int64 or int32, got " << dtype_name(cu_seqlens_dtype);
  const double scale = s.scale != 0.0 ? s.scale : 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  return Dims{s.q_heads, s.kv_heads, s.head_dim, s.sequences, static_cast<float>(scale), s.window};
}

// Calls f with a null pointer of the offsets' element type (int64_t or int32_t).
template <typename F>
void visit_offsets(DType cu_seqlens_dtype, F&& f) {
  if (cu_seqlens_dtype == DType::kInt64) {
    f(static_cast<int64_t*>(nullptr));
  } else {
    f(static_cast<int32_t*>(nullptr));
  }
}

}  // namespace hspmd::kernels::cuda::attention_detail
