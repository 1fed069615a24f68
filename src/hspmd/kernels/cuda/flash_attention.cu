#include <mma.h>

#include "hspmd/kernels/cuda/attention_choice.h"
#include "hspmd/kernels/cuda/attention_sequences.cuh"
#include "hspmd/kernels/cuda/flash_attention.h"

namespace hspmd::kernels::cuda {

namespace {

namespace wmma = nvcuda::wmma;
using attention_detail::Dims;
using attention_detail::first_key;
using bf16 = __nv_bfloat16;

constexpr int kRows = static_cast<int>(kFlashTileRows);  // query rows and key rows of a tile
constexpr int kWarps = static_cast<int>(kFlashWarps);    // each owns 16 rows of the block's tile
constexpr int kThreads = kWarps * 32;
constexpr int kFrag = 16;  // wmma's m = n = k
static_assert(kWarps * kFrag == kRows);
constexpr int kScorePitch = kRows + 4;        // float [64][68]
constexpr int kProbabilityPitch = kRows + 8;  // bf16 [64][72]

using FragA = wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;

// Shared memory carved in order; every size is a multiple of 128 bytes, so every part is aligned
// for the fragments' 32-byte loads.
struct Carver {
  unsigned char* next;
  template <typename T>
  __device__ T* take(int count) {
    T* part = reinterpret_cast<T*>(next);
    next += count * static_cast<int>(sizeof(T));
    return part;
  }
};

template <int D>
constexpr int kTilePitch = D + 8;  // bf16 [64][D + 8]
template <int D>
constexpr int kTileElements = kRows* kTilePitch<D>;
constexpr int kScoreElements = kRows * kScorePitch;
constexpr int kProbabilityElements = kRows * kProbabilityPitch;

// Rows t0 .. t0 + 63 of head `head` of a [tokens, heads, D] bf16 tensor into a [64][D + 8] tile,
// 16 bytes per load; rows past the end are zeros.
template <int D>
__device__ void load_tile(bf16* tile, const bf16* src, int64_t t0, int64_t tokens, int64_t heads, int64_t head) {
  constexpr int kVectors = D / 8;
  for (int e = threadIdx.x; e < kRows * kVectors; e += kThreads) {
    const int row = e / kVectors, x = (e % kVectors) * 8;
    const int64_t t = t0 + row;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (t < tokens) value = *reinterpret_cast<const uint4*>(src + (t * heads + head) * D + x);
    *reinterpret_cast<uint4*>(tile + row * kTilePitch<D> + x) = value;
  }
}

// out[16 x 64] (pitch kScorePitch) = a[16 x D] b[64 x D]^T: a's 16 rows by every row of b.
template <int D>
__device__ void rows_times_tile_transposed(float* out, const bf16* a, const bf16* b) {
  #pragma unroll
  for (int n = 0; n < kRows / kFrag; ++n) {
    FragAcc acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int x = 0; x < D; x += kFrag) {
      FragA fa;
      FragBCol fb;
      wmma::load_matrix_sync(fa, a + x, kTilePitch<D>);
      wmma::load_matrix_sync(fb, b + n * kFrag * kTilePitch<D> + x, kTilePitch<D>);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + n * kFrag, acc, kScorePitch, wmma::mem_row_major);
  }
}

// acc[n] (columns 16n .. 16n + 15 of a 16 x D result) += p[16 x 64] (pitch kProbabilityPitch) b[64 x D].
template <int D>
__device__ void accumulate_rows_times_tile(FragAcc (&acc)[D / kFrag], const bf16* p, const bf16* b) {
  for (int c = 0; c < kRows; c += kFrag) {
    FragA fa;
    wmma::load_matrix_sync(fa, p + c, kProbabilityPitch);
    #pragma unroll
    for (int n = 0; n < D / kFrag; ++n) {
      FragBRow fb;
      wmma::load_matrix_sync(fb, b + c * kTilePitch<D> + n * kFrag, kTilePitch<D>);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// Writes scale * acc (16 rows t0 .. t0 + 15 of a 16 x D block) to rows t of head `head` of a
// [tokens, heads, D] float tensor, rows past the end left out; `stage` is the warp's 16 x 16 float
// scratch (pitch kScorePitch).
template <int D>
__device__ void store_rows(float* dst, const FragAcc (&acc)[D / kFrag], float scale, float* stage, int64_t t0,
                           int64_t tokens, int64_t heads, int64_t head) {
  const int lane = threadIdx.x % 32;
  #pragma unroll
  for (int n = 0; n < D / kFrag; ++n) {
    wmma::store_matrix_sync(stage, acc[n], kScorePitch, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < kFrag * kFrag; e += 32) {
      const int row = e / kFrag, col = e % kFrag;
      const int64_t t = t0 + row;
      if (t < tokens) dst[(t * heads + head) * D + n * kFrag + col] = scale * stage[row * kScorePitch + col];
    }
    __syncwarp();
  }
}

// Row statistics of query tile q0 for head h, two threads per row: the saved lse, delta =
// sum(dout * out) (the backward's row term, from the stored bf16 out), the row's first key.
template <int D, typename I>
__device__ void load_row_statistics(float* row_lse, float* row_delta, int* row_first, const bf16* out, const bf16* dout,
                                    const float* lse, const I* cu_seqlens, const Dims& d, int64_t tokens, int64_t q0,
                                    int64_t h) {
  const int row = threadIdx.x / 2, half = threadIdx.x % 2;
  const int64_t i = q0 + row;
  float partial = 0.0f;
  if (i < tokens) {
    const int64_t base = (i * d.q_heads + h) * D;
    for (int x = half; x < D; x += 2) partial += __bfloat162float(out[base + x]) * __bfloat162float(dout[base + x]);
  }
  partial += __shfl_xor_sync(0xffffffffu, partial, 1);
  if (half == 0) {
    row_delta[row] = partial;
    row_lse[row] = i < tokens ? lse[h * tokens + i] : 0.0f;
    row_first[row] = i < tokens ? static_cast<int>(first_key(cu_seqlens, d, i)) : 0;
  }
}
static_assert(kThreads == 2 * kRows, "load_row_statistics gives each row two threads");

// Forward: block (query tile blockIdx.x, query head blockIdx.y); warp w owns query rows 16w ..
// 16w + 15; in the softmax each row has two lanes (lane / 2 its row, lane % 2 its even or odd
// columns).
template <int D, typename I>
__global__ void __launch_bounds__(kThreads) flash_fwd(const bf16* q, const bf16* k, const bf16* v, const I* cu_seqlens,
                                                      bf16* out, float* lse, int64_t tokens, Dims d) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kOutPitch = D + 4;
  Carver carve{smem};
  bf16* qs = carve.take<bf16>(kTileElements<D>);
  bf16* ks = carve.take<bf16>(kTileElements<D>);
  bf16* vs = carve.take<bf16>(kTileElements<D>);
  float* scores = carve.take<float>(kScoreElements);
  bf16* probabilities = carve.take<bf16>(kProbabilityElements);
  float* acc_out = carve.take<float>(kRows * kOutPitch);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kRows, h = blockIdx.y;
  const int64_t g = h / (d.q_heads / d.kv_heads);
  load_tile<D>(qs, q, q0, tokens, d.q_heads, h);
  for (int e = threadIdx.x; e < kRows * kOutPitch; e += kThreads) acc_out[e] = 0.0f;

  const int row = warp * kFrag + lane / 2, half = lane % 2;
  const int64_t i = q0 + row;
  const int64_t first = i < tokens ? first_key(cu_seqlens, d, i) : 0;
  float running_max = -INFINITY, running_sum = 0.0f;
  float* score_row = scores + row * kScorePitch;
  bf16* probability_row = probabilities + row * kProbabilityPitch;
  float* out_row = acc_out + row * kOutPitch;

  // Keys from the tile's first row's first key (first keys never decrease with the row) to its
  // last row.
  const int64_t last_row = (q0 + kRows < tokens ? q0 + kRows : tokens) - 1;
  for (int64_t k0 = first_key(cu_seqlens, d, q0); k0 <= last_row; k0 += kRows) {
    __syncthreads();  // every warp is done with the previous tile's ks and vs
    load_tile<D>(ks, k, k0, tokens, d.kv_heads, g);
    load_tile<D>(vs, v, k0, tokens, d.kv_heads, g);
    __syncthreads();  // ks, vs (and, the first time, qs and acc_out) written

    rows_times_tile_transposed<D>(scores + warp * kFrag * kScorePitch, qs + warp * kFrag * kTilePitch<D>, ks);
    __syncwarp();

    float tile_max = -INFINITY;
    for (int c = half; c < kRows; c += 2) {
      const int64_t j = k0 + c;
      const float s = i < tokens && j >= first && j <= i ? score_row[c] * d.scale : -INFINITY;
      score_row[c] = s;
      tile_max = fmaxf(tile_max, s);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float new_max = fmaxf(running_max, tile_max);
    // A row with no key yet keeps max -inf and contributes nothing (exp(-inf - -inf) is NaN).
    const bool seen = new_max != -INFINITY;
    const float rescale = seen ? expf(running_max - new_max) : 1.0f;
    float tile_sum = 0.0f;
    for (int c = half; c < kRows; c += 2) {
      const float p = seen ? expf(score_row[c] - new_max) : 0.0f;
      probability_row[c] = __float2bfloat16_rn(p);
      tile_sum += p;
    }
    tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 1);
    running_sum = running_sum * rescale + tile_sum;
    running_max = new_max;
    for (int x = half; x < D; x += 2) out_row[x] *= rescale;
    __syncwarp();

    FragAcc acc[D / kFrag];
    float* warp_out = acc_out + warp * kFrag * kOutPitch;
    #pragma unroll
    for (int n = 0; n < D / kFrag; ++n)
      wmma::load_matrix_sync(acc[n], warp_out + n * kFrag, kOutPitch, wmma::mem_row_major);
    accumulate_rows_times_tile<D>(acc, probabilities + warp * kFrag * kProbabilityPitch, vs);
    #pragma unroll
    for (int n = 0; n < D / kFrag; ++n)
      wmma::store_matrix_sync(warp_out + n * kFrag, acc[n], kOutPitch, wmma::mem_row_major);
    __syncwarp();
  }
  if (i < tokens) {
    bf16* dst = out + (i * d.q_heads + h) * D;
    for (int x = half; x < D; x += 2) dst[x] = __float2bfloat16_rn(out_row[x] / running_sum);
    if (half == 0) lse[h * tokens + i] = running_max + logf(running_sum);
  }
}

// P and dS of one element: p = exp(s scale - lse) where query i sees key j, else 0; ds = p (dp - delta).
struct ProbabilityAndGradient {
  float p, ds;
};
__device__ __forceinline__ ProbabilityAndGradient probability_and_gradient(bool sees, float s, float dp, float scale,
                                                                           float row_lse, float row_delta) {
  const float p = sees ? expf(s * scale - row_lse) : 0.0f;
  return {p, p * (dp - row_delta)};
}

// Backward, dK and dV: block (key tile blockIdx.x, kv head blockIdx.y); warp w owns key rows
// 16w .. 16w + 15 and computes S^T = K Q^T and dP^T = V dO^T for them, then dV += P^T dO and
// dK += dS^T Q in registers, over every query head of the group and every query tile that sees
// one of the block's keys.
template <int D, typename I>
__global__ void __launch_bounds__(kThreads)
    flash_bwd_dkdv(const bf16* q, const bf16* k, const bf16* v, const I* cu_seqlens, const bf16* out, const float* lse,
                   const bf16* dout, float* dk, float* dv, int64_t tokens, Dims d) {
  extern __shared__ __align__(128) unsigned char smem[];
  Carver carve{smem};
  bf16* ks = carve.take<bf16>(kTileElements<D>);
  bf16* vs = carve.take<bf16>(kTileElements<D>);
  bf16* qs = carve.take<bf16>(kTileElements<D>);
  bf16* dos = carve.take<bf16>(kTileElements<D>);
  float* scores = carve.take<float>(kScoreElements);
  float* dps = carve.take<float>(kScoreElements);
  bf16* probabilities = carve.take<bf16>(kProbabilityElements);
  bf16* dss = carve.take<bf16>(kProbabilityElements);
  float* row_lse = carve.take<float>(kRows);
  float* row_delta = carve.take<float>(kRows);
  int* row_first = carve.take<int>(kRows);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kRows, g = blockIdx.y;
  const int64_t group = d.q_heads / d.kv_heads;
  load_tile<D>(ks, k, k0, tokens, d.kv_heads, g);
  load_tile<D>(vs, v, k0, tokens, d.kv_heads, g);

  const int key_row = warp * kFrag + lane / 2, half = lane % 2;  // in the elementwise step
  const int64_t j = k0 + key_row;
  const int64_t last_key = (k0 + kRows < tokens ? k0 + kRows : tokens) - 1;
  // Queries from the tile's first key (no earlier query sees it) to the last that sees its last key.
  const int64_t q_end = attention_detail::last_query_end(cu_seqlens, d, last_key);

  FragAcc dk_acc[D / kFrag], dv_acc[D / kFrag];
  #pragma unroll
  for (int n = 0; n < D / kFrag; ++n) {
    wmma::fill_fragment(dk_acc[n], 0.0f);
    wmma::fill_fragment(dv_acc[n], 0.0f);
  }
  const bf16* warp_k = ks + warp * kFrag * kTilePitch<D>;
  const bf16* warp_v = vs + warp * kFrag * kTilePitch<D>;
  float* warp_scores = scores + warp * kFrag * kScorePitch;
  float* warp_dps = dps + warp * kFrag * kScorePitch;
  bf16* warp_p = probabilities + warp * kFrag * kProbabilityPitch;
  bf16* warp_ds = dss + warp * kFrag * kProbabilityPitch;
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    for (int64_t q0 = k0; q0 < q_end; q0 += kRows) {
      __syncthreads();  // every warp is done with the previous qs, dos and row statistics
      load_tile<D>(qs, q, q0, tokens, d.q_heads, h);
      load_tile<D>(dos, dout, q0, tokens, d.q_heads, h);
      load_row_statistics<D>(row_lse, row_delta, row_first, out, dout, lse, cu_seqlens, d, tokens, q0, h);
      __syncthreads();  // qs, dos, row statistics (and, the first time, ks and vs) written

      rows_times_tile_transposed<D>(warp_scores, warp_k, qs);
      rows_times_tile_transposed<D>(warp_dps, warp_v, dos);
      __syncwarp();
      for (int c = half; c < kRows; c += 2) {
        const int64_t i = q0 + c;
        const bool sees = i < tokens && j <= i && j >= row_first[c];
        const auto [p, ds] = probability_and_gradient(
            sees, scores[key_row * kScorePitch + c], dps[key_row * kScorePitch + c], d.scale, row_lse[c], row_delta[c]);
        probabilities[key_row * kProbabilityPitch + c] = __float2bfloat16_rn(p);
        dss[key_row * kProbabilityPitch + c] = __float2bfloat16_rn(ds);
      }
      __syncwarp();
      accumulate_rows_times_tile<D>(dv_acc, warp_p, dos);
      accumulate_rows_times_tile<D>(dk_acc, warp_ds, qs);
    }
  }
  // Every key row of the tile is written, zeros where no query sees it: no clearing beforehand.
  store_rows<D>(dk, dk_acc, d.scale, warp_scores, k0 + warp * kFrag, tokens, d.kv_heads, g);
  store_rows<D>(dv, dv_acc, 1.0f, warp_scores, k0 + warp * kFrag, tokens, d.kv_heads, g);
}

// Backward, dQ: block (query tile blockIdx.x, query head blockIdx.y); warp w owns query rows
// 16w .. 16w + 15: S = Q K^T, dP = dO V^T, dQ += dS K over the key tiles the forward visits.
template <int D, typename I>
__global__ void __launch_bounds__(kThreads)
    flash_bwd_dq(const bf16* q, const bf16* k, const bf16* v, const I* cu_seqlens, const bf16* out, const float* lse,
                 const bf16* dout, float* dq, int64_t tokens, Dims d) {
  extern __shared__ __align__(128) unsigned char smem[];
  Carver carve{smem};
  bf16* qs = carve.take<bf16>(kTileElements<D>);
  bf16* dos = carve.take<bf16>(kTileElements<D>);
  bf16* ks = carve.take<bf16>(kTileElements<D>);
  bf16* vs = carve.take<bf16>(kTileElements<D>);
  float* scores = carve.take<float>(kScoreElements);
  float* dps = carve.take<float>(kScoreElements);
  bf16* dss = carve.take<bf16>(kProbabilityElements);
  float* row_lse = carve.take<float>(kRows);
  float* row_delta = carve.take<float>(kRows);
  int* row_first = carve.take<int>(kRows);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kRows, h = blockIdx.y;
  const int64_t g = h / (d.q_heads / d.kv_heads);
  load_tile<D>(qs, q, q0, tokens, d.q_heads, h);
  load_tile<D>(dos, dout, q0, tokens, d.q_heads, h);
  load_row_statistics<D>(row_lse, row_delta, row_first, out, dout, lse, cu_seqlens, d, tokens, q0, h);

  const int row = warp * kFrag + lane / 2, half = lane % 2;
  const int64_t i = q0 + row;
  FragAcc dq_acc[D / kFrag];
  #pragma unroll
  for (int n = 0; n < D / kFrag; ++n) wmma::fill_fragment(dq_acc[n], 0.0f);
  float* warp_scores = scores + warp * kFrag * kScorePitch;
  float* warp_dps = dps + warp * kFrag * kScorePitch;
  bf16* warp_ds = dss + warp * kFrag * kProbabilityPitch;

  const int64_t last_row = (q0 + kRows < tokens ? q0 + kRows : tokens) - 1;
  for (int64_t k0 = first_key(cu_seqlens, d, q0); k0 <= last_row; k0 += kRows) {
    __syncthreads();  // every warp is done with the previous ks and vs
    load_tile<D>(ks, k, k0, tokens, d.kv_heads, g);
    load_tile<D>(vs, v, k0, tokens, d.kv_heads, g);
    __syncthreads();  // ks, vs (and, the first time, qs, dos and row statistics) written

    rows_times_tile_transposed<D>(warp_scores, qs + warp * kFrag * kTilePitch<D>, ks);
    rows_times_tile_transposed<D>(warp_dps, dos + warp * kFrag * kTilePitch<D>, vs);
    __syncwarp();
    for (int c = half; c < kRows; c += 2) {
      const int64_t j = k0 + c;
      const bool sees = i < tokens && j <= i && j >= row_first[row];
      const float ds = probability_and_gradient(sees, scores[row * kScorePitch + c], dps[row * kScorePitch + c],
                                                d.scale, row_lse[row], row_delta[row])
                           .ds;
      dss[row * kProbabilityPitch + c] = __float2bfloat16_rn(ds);
    }
    __syncwarp();
    accumulate_rows_times_tile<D>(dq_acc, warp_ds, ks);
  }
  __syncwarp();
  store_rows<D>(dq, dq_acc, d.scale, warp_scores, q0 + warp * kFrag, tokens, d.q_heads, h);
}

// The kernels' shared memory layouts, as the plan (attention_choice.h) sizes them.
template <int D>
constexpr int64_t kFwdSmem = 3 * kTileElements<D> * 2 + kScoreElements * 4 + kProbabilityElements * 2 +
                             kRows*(D + 4) * 4;
template <int D>
constexpr int64_t kDkdvSmem =
    4 * kTileElements<D> * 2 + 2 * kScoreElements * 4 + 2 * kProbabilityElements * 2 + 3 * kRows * 4;
template <int D>
constexpr int64_t kDqSmem =
    4 * kTileElements<D> * 2 + 2 * kScoreElements * 4 + kProbabilityElements * 2 + 3 * kRows * 4;
static_assert(kDkdvSmem<128> <= kHopperMaxBlockSmemBytes && kDqSmem<128> <= kHopperMaxBlockSmemBytes &&
              kFwdSmem<128> <= kHopperMaxBlockSmemBytes);
static_assert((kTileElements<64> * 2) % 128 == 0 && (kTileElements<128> * 2) % 128 == 0 &&
              (kScoreElements * 4) % 128 == 0 && (kProbabilityElements * 2) % 128 == 0 &&
              (kRows * (64 + 4) * 4) % 128 == 0 && (kRows * (128 + 4) * 4) % 128 == 0);

// Launches kernel with `smem` bytes of dynamic shared memory (opting in past the 48 KiB default),
// after checking the size against the plan's.
template <typename Kernel, typename... Args>
void launch(const char* name, Kernel kernel, int64_t smem, int64_t planned, dim3 grid, cudaStream_t stream,
            Args... args) {
  HSPMD_CHECK(smem == planned) << name << ": shared memory layout of " << smem << " bytes differs from the plan's "
                               << planned;
  const cudaError_t set =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  HSPMD_CHECK(set == cudaSuccess) << name << ": asking for " << smem
                                  << " bytes of shared memory failed: " << cudaGetErrorString(set);
  kernel<<<grid, kThreads, static_cast<size_t>(smem), stream>>>(args...);
  check_launch(name);
}

// Calls f with the head dim as a compile-time constant (64 or 128) and a null offsets pointer.
template <typename F>
void visit_head_dim_and_offsets(const char* name, int64_t head_dim, DType cu_seqlens_dtype, F&& f) {
  HSPMD_CHECK(head_dim == 64 || head_dim == 128) << name << ": head dim " << head_dim << " is not 64 or 128";
  attention_detail::visit_offsets(cu_seqlens_dtype, [&](auto* offsets_tag) {
    if (head_dim == 64) {
      f(std::integral_constant<int, 64>{}, offsets_tag);
    } else {
      f(std::integral_constant<int, 128>{}, offsets_tag);
    }
  });
}

void check_applies(const char* name, int64_t head_dim, std::initializer_list<const void*> tensors) {
  HSPMD_CHECK(flash_attention_applies(DType::kBFloat16, head_dim, tensors))
      << name << ": needs head dim 64 or 128 and 16-byte aligned tensors; got head dim " << head_dim;
}

}  // namespace

void flash_attention_fwd(const void* q, const void* k, const void* v, DType cu_seqlens_dtype, const void* cu_seqlens,
                         void* out, float* lse, const AttentionShape& shape, cudaStream_t stream) {
  const char* name = "cuda flash attention_fwd";
  const Dims d = attention_detail::checked_dims(name, cu_seqlens_dtype, shape);
  check_applies(name, shape.head_dim, {q, k, v, out});
  if (shape.tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(flash_attention_tiles(shape.tokens)), static_cast<unsigned>(shape.q_heads));
  visit_head_dim_and_offsets(name, shape.head_dim, cu_seqlens_dtype, [&](auto head_dim, auto* offsets_tag) {
    constexpr int D = decltype(head_dim)::value;
    using I = std::remove_pointer_t<decltype(offsets_tag)>;
    launch(name, flash_fwd<D, I>, kFwdSmem<D>, flash_attention_fwd_smem_bytes(D), grid, stream,
           static_cast<const bf16*>(q), static_cast<const bf16*>(k), static_cast<const bf16*>(v),
           static_cast<const I*>(cu_seqlens), static_cast<bf16*>(out), lse, shape.tokens, d);
  });
}

void flash_attention_bwd(const void* q, const void* k, const void* v, DType cu_seqlens_dtype, const void* cu_seqlens,
                         const void* out, const float* lse, const void* dout, float* dq, float* dk, float* dv,
                         const AttentionShape& shape, cudaStream_t stream) {
  const char* name = "cuda flash attention_bwd";
  const Dims d = attention_detail::checked_dims(name, cu_seqlens_dtype, shape);
  check_applies(name, shape.head_dim, {q, k, v, out, dout});
  if (shape.tokens == 0) return;
  const auto tiles = static_cast<unsigned>(flash_attention_tiles(shape.tokens));
  visit_head_dim_and_offsets(name, shape.head_dim, cu_seqlens_dtype, [&](auto head_dim, auto* offsets_tag) {
    constexpr int D = decltype(head_dim)::value;
    using I = std::remove_pointer_t<decltype(offsets_tag)>;
    const auto* qb = static_cast<const bf16*>(q);
    const auto* kb = static_cast<const bf16*>(k);
    const auto* vb = static_cast<const bf16*>(v);
    const auto* ob = static_cast<const bf16*>(out);
    const auto* dob = static_cast<const bf16*>(dout);
    const auto* offsets = static_cast<const I*>(cu_seqlens);
    launch(name, flash_bwd_dkdv<D, I>, kDkdvSmem<D>, flash_attention_bwd_dkdv_smem_bytes(D),
           dim3(tiles, static_cast<unsigned>(shape.kv_heads)), stream, qb, kb, vb, offsets, ob, lse, dob, dk, dv,
           shape.tokens, d);
    launch(name, flash_bwd_dq<D, I>, kDqSmem<D>, flash_attention_bwd_dq_smem_bytes(D),
           dim3(tiles, static_cast<unsigned>(shape.q_heads)), stream, qb, kb, vb, offsets, ob, lse, dob, dq,
           shape.tokens, d);
  });
}

}  // namespace hspmd::kernels::cuda
