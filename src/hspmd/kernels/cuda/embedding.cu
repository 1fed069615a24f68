#include "hspmd/kernels/cuda/embedding.h"

#include "hspmd/kernels/cuda/device_math.cuh"

namespace hspmd::kernels::cuda {

namespace {

using device::to_float;

// One block per token, its threads over the row.
template <typename T, typename I>
__global__ void embedding_rows(const T* table, const I* ids, T* y, int64_t vocab, int64_t hidden,
                               int64_t vocab_start) {
  const int64_t t = blockIdx.x;
  const int64_t row = static_cast<int64_t>(ids[t]) - vocab_start;
  T* out = y + t * hidden;
  if (row < 0 || row >= vocab) {
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) out[i] = device::from_float<T>(0.0f);
    return;
  }
  const T* in = table + row * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) out[i] = in[i];
}

template <typename T, typename I>
__global__ void embedding_scatter_add(const I* ids, const T* dy, float* dtable, int64_t vocab, int64_t hidden,
                                      int64_t vocab_start, int64_t padding_id) {
  const int64_t t = blockIdx.x;
  const int64_t row = static_cast<int64_t>(ids[t]) - vocab_start;
  if (row < 0 || row >= vocab || static_cast<int64_t>(ids[t]) == padding_id) return;
  const T* in = dy + t * hidden;
  float* out = dtable + row * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) atomicAdd(out + i, to_float(in[i]));
}

void check_shape(const char* kernel, DType ids_dtype, const EmbeddingShape& s) {
  HSPMD_CHECK(s.tokens >= 0 && s.tokens <= 0x7fffffff && s.vocab > 0 && s.hidden > 0)
      << kernel << ": need 0 <= tokens < 2^31, vocab > 0, hidden > 0; got tokens " << s.tokens << ", vocab "
      << s.vocab << ", hidden " << s.hidden;
  HSPMD_CHECK(ids_dtype == DType::kInt64 || ids_dtype == DType::kInt32)
      << kernel << ": ids must be int64 or int32, got " << dtype_name(ids_dtype);
}

// Calls f with a null pointer of the ids' index type.
template <typename F>
void visit_ids(DType ids_dtype, F&& f) {
  if (ids_dtype == DType::kInt64) {
    f(static_cast<int64_t*>(nullptr));
  } else {
    f(static_cast<int32_t*>(nullptr));
  }
}

}  // namespace

void embedding_fwd(DType dtype, const void* table, DType ids_dtype, const void* ids, void* y,
                   const EmbeddingShape& s, cudaStream_t stream) {
  const char* kernel = "cuda embedding_fwd";
  check_shape(kernel, ids_dtype, s);
  if (s.tokens == 0) return;
  visit_float_or_bf16(dtype, kernel, "table", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    visit_ids(ids_dtype, [&](auto* id_tag) {
      using I = std::remove_pointer_t<decltype(id_tag)>;
      embedding_rows<T, I><<<static_cast<unsigned>(s.tokens), device::row_threads(s.hidden), 0, stream>>>(
          static_cast<const T*>(table), static_cast<const I*>(ids), static_cast<T*>(y), s.vocab, s.hidden,
          s.vocab_start);
    });
  });
  check_launch(kernel);
}

void embedding_bwd(DType dtype, DType ids_dtype, const void* ids, const void* dy, float* dtable,
                   const EmbeddingShape& s, cudaStream_t stream) {
  const char* kernel = "cuda embedding_bwd";
  check_shape(kernel, ids_dtype, s);
  const cudaError_t cleared = cudaMemsetAsync(dtable, 0, static_cast<size_t>(s.vocab * s.hidden) * sizeof(float), stream);
  HSPMD_CHECK(cleared == cudaSuccess) << kernel << ": clearing dtable failed: " << cudaGetErrorString(cleared);
  if (s.tokens == 0) return;
  visit_float_or_bf16(dtype, kernel, "dy", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    visit_ids(ids_dtype, [&](auto* id_tag) {
      using I = std::remove_pointer_t<decltype(id_tag)>;
      embedding_scatter_add<T, I><<<static_cast<unsigned>(s.tokens), device::row_threads(s.hidden), 0, stream>>>(
          static_cast<const I*>(ids), static_cast<const T*>(dy), dtable, s.vocab, s.hidden, s.vocab_start,
          s.padding_id);
    });
  });
  check_launch(kernel);
}

}  // namespace hspmd::kernels::cuda
