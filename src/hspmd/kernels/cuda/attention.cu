#include "hspmd/kernels/cuda/attention.h"

#include "hspmd/kernels/cuda/attention_choice.h"
#include "hspmd/kernels/cuda/attention_sequences.cuh"
#include "hspmd/kernels/cuda/flash_attention.h"

namespace hspmd::kernels::cuda {

namespace {

using attention_detail::Dims;
using attention_detail::first_key;
using attention_detail::kMaxHeadDim;
using device::from_float;
using device::to_float;

constexpr int kThreads = 128;  // keys per chunk; threads over the head dimension

// Where the rows are (context parallelism, kernels/context_attention.h): query row i sits at
// packed position q_pos[i], and packed position p's key/value row is kv_row[p]. Null: the packed
// order itself (plain attention).
template <typename J>
struct Rows {
  const J* q_pos = nullptr;
  const int64_t* kv_row = nullptr;
  __device__ int64_t position(int64_t i) const { return q_pos ? static_cast<int64_t>(q_pos[i]) : i; }
  __device__ int64_t key_row(int64_t p) const { return kv_row ? kv_row[p] : p; }
};

// Block (query row i = blockIdx.x, query head h = blockIdx.y); the query's packed position is pos.
template <typename T, typename I, typename J>
__global__ void attention_fwd_rows(const T* q, const T* k, const T* v, const I* cu_seqlens, T* out, float* lse,
                                   int64_t tokens, Dims d, Rows<J> rows) {
  __shared__ float q_row[kMaxHeadDim];
  __shared__ float p[kThreads];
  __shared__ int64_t key_rows[kThreads];
  __shared__ float scratch[32];
  const int64_t i = blockIdx.x, h = blockIdx.y, g = h / (d.q_heads / d.kv_heads);
  const int64_t D = d.head_dim;
  const int64_t pos = rows.position(i);
  for (int64_t x = threadIdx.x; x < D; x += blockDim.x) q_row[x] = to_float(q[(i * d.q_heads + h) * D + x]);
  __syncthreads();
  const int64_t start = first_key(cu_seqlens, d, pos);
  float running_max = -INFINITY, running_sum = 0.0f;
  float acc[kMaxHeadDim / kThreads] = {};  // out[x] for x = threadIdx.x + r * kThreads
  for (int64_t chunk = start; chunk <= pos; chunk += kThreads) {
    const int64_t j = chunk + threadIdx.x;
    float s = -INFINITY;
    if (j <= pos) {
      key_rows[threadIdx.x] = rows.key_row(j);
      const T* kr = k + (key_rows[threadIdx.x] * d.kv_heads + g) * D;
      s = 0.0f;
      for (int64_t x = 0; x < D; ++x) s += q_row[x] * to_float(kr[x]);
      s *= d.scale;
    }
    const float chunk_max = device::block_max(s, scratch);
    const float new_max = fmaxf(running_max, chunk_max);
    const float rescale = expf(running_max - new_max);  // 0 on the first chunk (exp(-inf))
    const float pj = j <= pos ? expf(s - new_max) : 0.0f;
    p[threadIdx.x] = pj;
    running_sum = running_sum * rescale + device::block_sum(pj, scratch);  // block_sum syncs: p, key_rows written
    running_max = new_max;
    const int64_t keys = pos + 1 - chunk < kThreads ? pos + 1 - chunk : kThreads;
    for (int r = 0; r * kThreads < D; ++r) {
      const int64_t x = threadIdx.x + r * kThreads;
      if (x >= D) break;
      float a = acc[r] * rescale;
      for (int64_t c = 0; c < keys; ++c) a += p[c] * to_float(v[(key_rows[c] * d.kv_heads + g) * D + x]);
      acc[r] = a;
    }
    __syncthreads();  // p and key_rows are read before the next chunk writes them
  }
  for (int r = 0; r * kThreads < D; ++r) {
    const int64_t x = threadIdx.x + r * kThreads;
    if (x < D) out[(i * d.q_heads + h) * D + x] = from_float<T>(acc[r] / running_sum);
  }
  if (threadIdx.x == 0) lse[h * tokens + i] = running_max + logf(running_sum);
}

// With p = exp(s - lse), dp = dout . v, ds = p (dp - sum(dout * out)):
//   dq_i = scale sum_j ds_j k_j,  dk_j += scale ds_j q_i,  dv_j += p_j dout_i.
// dk and dv land on the key rows (kv_row), whatever their order.
template <typename T, typename I, typename J>
__global__ void attention_bwd_rows(const T* q, const T* k, const T* v, const I* cu_seqlens, const T* out,
                                   const float* lse, const T* dout, float* dq, float* dk, float* dv, int64_t tokens,
                                   Dims d, Rows<J> rows) {
  __shared__ float q_row[kMaxHeadDim];
  __shared__ float do_row[kMaxHeadDim];
  __shared__ float p[kThreads];
  __shared__ float ds[kThreads];
  __shared__ int64_t key_rows[kThreads];
  __shared__ float scratch[32];
  const int64_t i = blockIdx.x, h = blockIdx.y, g = h / (d.q_heads / d.kv_heads);
  const int64_t D = d.head_dim;
  const int64_t pos = rows.position(i);
  const int64_t row = (i * d.q_heads + h) * D;
  float dot_out = 0.0f;
  for (int64_t x = threadIdx.x; x < D; x += blockDim.x) {
    q_row[x] = to_float(q[row + x]);
    do_row[x] = to_float(dout[row + x]);
    dot_out += do_row[x] * to_float(out[row + x]);
  }
  const float delta = device::block_sum(dot_out, scratch);  // also makes q_row, do_row visible
  const float row_lse = lse[h * tokens + i];
  const int64_t start = first_key(cu_seqlens, d, pos);
  float dq_acc[kMaxHeadDim / kThreads] = {};
  for (int64_t chunk = start; chunk <= pos; chunk += kThreads) {
    const int64_t j = chunk + threadIdx.x;
    float pj = 0.0f, dsj = 0.0f;
    if (j <= pos) {
      key_rows[threadIdx.x] = rows.key_row(j);
      const T* kr = k + (key_rows[threadIdx.x] * d.kv_heads + g) * D;
      const T* vr = v + (key_rows[threadIdx.x] * d.kv_heads + g) * D;
      float s = 0.0f, dp = 0.0f;
      for (int64_t x = 0; x < D; ++x) {
        s += q_row[x] * to_float(kr[x]);
        dp += do_row[x] * to_float(vr[x]);
      }
      pj = expf(s * d.scale - row_lse);
      dsj = pj * (dp - delta);
    }
    p[threadIdx.x] = pj;
    ds[threadIdx.x] = dsj;
    __syncthreads();
    const int64_t keys = pos + 1 - chunk < kThreads ? pos + 1 - chunk : kThreads;
    for (int r = 0; r * kThreads < D; ++r) {
      const int64_t x = threadIdx.x + r * kThreads;
      if (x >= D) break;
      float a = dq_acc[r];
      for (int64_t c = 0; c < keys; ++c) {
        const int64_t kv = (key_rows[c] * d.kv_heads + g) * D + x;
        a += ds[c] * to_float(k[kv]);
        atomicAdd(dk + kv, d.scale * ds[c] * q_row[x]);
        atomicAdd(dv + kv, p[c] * do_row[x]);
      }
      dq_acc[r] = a;
    }
    __syncthreads();
  }
  for (int r = 0; r * kThreads < D; ++r) {
    const int64_t x = threadIdx.x + r * kThreads;
    if (x < D) dq[row + x] = d.scale * dq_acc[r];
  }
}

// kv_row[kv_index[r]] = r: the row of each packed position.
template <typename J>
__global__ void inverse_permutation(const J* kv_index, int64_t* kv_row, int64_t keys) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < keys;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    kv_row[static_cast<int64_t>(kv_index[r])] = r;
  }
}

template <typename J>
void launch_fwd(const char* kernel, DType dtype, const void* q, const void* k, const void* v, DType cu_seqlens_dtype,
                const void* cu_seqlens, void* out, float* lse, const AttentionShape& shape, Rows<J> rows,
                cudaStream_t stream) {
  const Dims d = attention_detail::checked_dims(kernel, cu_seqlens_dtype, shape);
  if (shape.tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(shape.tokens), static_cast<unsigned>(shape.q_heads));
  visit_float_or_bf16(dtype, kernel, "q", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    attention_detail::visit_offsets(cu_seqlens_dtype, [&](auto* offsets_tag) {
      using I = std::remove_pointer_t<decltype(offsets_tag)>;
      attention_fwd_rows<T, I, J><<<grid, kThreads, 0, stream>>>(
          static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
          static_cast<const I*>(cu_seqlens), static_cast<T*>(out), lse, shape.tokens, d, rows);
    });
  });
  check_launch(kernel);
}

// keys: the rows of k, v, dk and dv (cleared first: keys no query here reaches get zero).
template <typename J>
void launch_bwd(const char* kernel, DType dtype, const void* q, const void* k, const void* v, DType cu_seqlens_dtype,
                const void* cu_seqlens, const void* out, const float* lse, const void* dout, float* dq, float* dk,
                float* dv, const AttentionShape& shape, int64_t keys, Rows<J> rows, cudaStream_t stream) {
  const Dims d = attention_detail::checked_dims(kernel, cu_seqlens_dtype, shape);
  const size_t kv_bytes = static_cast<size_t>(keys * shape.kv_heads * shape.head_dim) * sizeof(float);
  for (float* grad : {dk, dv}) {
    const cudaError_t cleared = cudaMemsetAsync(grad, 0, kv_bytes, stream);
    HSPMD_CHECK(cleared == cudaSuccess) << kernel << ": clearing dk/dv failed: " << cudaGetErrorString(cleared);
  }
  if (shape.tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(shape.tokens), static_cast<unsigned>(shape.q_heads));
  visit_float_or_bf16(dtype, kernel, "q", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    attention_detail::visit_offsets(cu_seqlens_dtype, [&](auto* offsets_tag) {
      using I = std::remove_pointer_t<decltype(offsets_tag)>;
      attention_bwd_rows<T, I, J><<<grid, kThreads, 0, stream>>>(
          static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
          static_cast<const I*>(cu_seqlens), static_cast<const T*>(out), lse, static_cast<const T*>(dout), dq, dk, dv,
          shape.tokens, d, rows);
    });
  });
  check_launch(kernel);
}

// Calls f with a null pointer of the index vectors' element type (int64_t or int32_t).
template <typename F>
void visit_index(const char* kernel, DType index_dtype, F&& f) {
  HSPMD_CHECK(index_dtype == DType::kInt64 || index_dtype == DType::kInt32)
      << kernel << ": q_index and kv_index must be int64 or int32, got " << dtype_name(index_dtype);
  attention_detail::visit_offsets(index_dtype, f);
}

// The Rows of a context-parallel call: kv_row filled on the stream from kv_index.
template <typename J>
Rows<J> context_rows(const char* kernel, const ContextRows& c, cudaStream_t stream) {
  HSPMD_CHECK(c.keys >= 0 && c.keys <= 0x7fffffff) << kernel << ": " << c.keys << " key rows, need 0 <= keys < 2^31";
  if (c.keys > 0) {
    inverse_permutation<J><<<device::grid_for(c.keys, 256), 256, 0, stream>>>(static_cast<const J*>(c.kv_index),
                                                                               c.kv_row, c.keys);
    check_launch(kernel);
  }
  return Rows<J>{static_cast<const J*>(c.q_index), c.kv_row};
}

}  // namespace

void reference_attention_fwd(DType dtype, const void* q, const void* k, const void* v, DType cu_seqlens_dtype,
                             const void* cu_seqlens, void* out, float* lse, const AttentionShape& shape,
                             cudaStream_t stream) {
  launch_fwd("cuda reference attention_fwd", dtype, q, k, v, cu_seqlens_dtype, cu_seqlens, out, lse, shape,
             Rows<int64_t>{}, stream);
}

void reference_attention_bwd(DType dtype, const void* q, const void* k, const void* v, DType cu_seqlens_dtype,
                             const void* cu_seqlens, const void* out, const float* lse, const void* dout, float* dq,
                             float* dk, float* dv, const AttentionShape& shape, cudaStream_t stream) {
  launch_bwd("cuda reference attention_bwd", dtype, q, k, v, cu_seqlens_dtype, cu_seqlens, out, lse, dout, dq, dk, dv,
             shape, shape.tokens, Rows<int64_t>{}, stream);
}

void context_attention_fwd(DType dtype, const void* q, const void* k, const void* v, DType cu_seqlens_dtype,
                           const void* cu_seqlens, const ContextRows& rows, void* out, float* lse,
                           const AttentionShape& shape, cudaStream_t stream) {
  const char* kernel = "cuda context_attention_fwd";
  visit_index(kernel, rows.index_dtype, [&](auto* tag) {
    using J = std::remove_pointer_t<decltype(tag)>;
    launch_fwd(kernel, dtype, q, k, v, cu_seqlens_dtype, cu_seqlens, out, lse, shape,
               context_rows<J>(kernel, rows, stream), stream);
  });
}

void context_attention_bwd(DType dtype, const void* q, const void* k, const void* v, DType cu_seqlens_dtype,
                           const void* cu_seqlens, const ContextRows& rows, const void* out, const float* lse,
                           const void* dout, float* dq, float* dk, float* dv, const AttentionShape& shape,
                           cudaStream_t stream) {
  const char* kernel = "cuda context_attention_bwd";
  visit_index(kernel, rows.index_dtype, [&](auto* tag) {
    using J = std::remove_pointer_t<decltype(tag)>;
    launch_bwd(kernel, dtype, q, k, v, cu_seqlens_dtype, cu_seqlens, out, lse, dout, dq, dk, dv, shape, rows.keys,
               context_rows<J>(kernel, rows, stream), stream);
  });
}

void attention_fwd(DType dtype, const void* q, const void* k, const void* v, DType cu_seqlens_dtype,
                   const void* cu_seqlens, void* out, float* lse, const AttentionShape& shape, cudaStream_t stream) {
  if (chosen_attention_kernel(dtype, shape.head_dim, {q, k, v, out}) == CudaAttentionKernel::kFlash) {
    flash_attention_fwd(q, k, v, cu_seqlens_dtype, cu_seqlens, out, lse, shape, stream);
  } else {
    reference_attention_fwd(dtype, q, k, v, cu_seqlens_dtype, cu_seqlens, out, lse, shape, stream);
  }
}

void attention_bwd(DType dtype, const void* q, const void* k, const void* v, DType cu_seqlens_dtype,
                   const void* cu_seqlens, const void* out, const float* lse, const void* dout, float* dq, float* dk,
                   float* dv, const AttentionShape& shape, cudaStream_t stream) {
  if (chosen_attention_kernel(dtype, shape.head_dim, {q, k, v, out, dout}) == CudaAttentionKernel::kFlash) {
    flash_attention_bwd(q, k, v, cu_seqlens_dtype, cu_seqlens, out, lse, dout, dq, dk, dv, shape, stream);
  } else {
    reference_attention_bwd(dtype, q, k, v, cu_seqlens_dtype, cu_seqlens, out, lse, dout, dq, dk, dv, shape, stream);
  }
}

}  // namespace hspmd::kernels::cuda
