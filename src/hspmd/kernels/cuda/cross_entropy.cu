#include "hspmd/kernels/cuda/cross_entropy.h"

#include "hspmd/kernels/cuda/device_math.cuh"

namespace hspmd::kernels::cuda {

namespace {

using device::from_float;
using device::to_float;

// One block per token: the row's max, then the sum of exp(logit - max).
template <typename T, typename I>
__global__ void cross_entropy_rows(const T* logits, const I* targets, float* losses, float* lse, int64_t vocab,
                                   int64_t ignore_index) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const T* row = logits + t * vocab;
  float max = -INFINITY;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) max = fmaxf(max, to_float(row[j]));
  max = device::block_max(max, scratch);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) sum += expf(to_float(row[j]) - max);
  sum = device::block_sum(sum, scratch);
  if (threadIdx.x != 0) return;
  const float row_lse = max + logf(sum);
  lse[t] = row_lse;
  const int64_t target = static_cast<int64_t>(targets[t]);
  if (target == ignore_index) {
    losses[t] = 0.0f;
  } else if (target < 0 || target >= vocab) {
    losses[t] = NAN;
  } else {
    losses[t] = row_lse - to_float(row[target]);
  }
}

template <typename T, typename I>
__global__ void cross_entropy_grad_rows(const T* logits, const I* targets, const float* lse, const float* dlosses,
                                        T* dlogits, int64_t vocab, int64_t ignore_index) {
  const int64_t t = blockIdx.x;
  const T* row = logits + t * vocab;
  T* out = dlogits + t * vocab;
  const int64_t target = static_cast<int64_t>(targets[t]);
  if (target == ignore_index) {
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) out[j] = from_float<T>(0.0f);
    return;
  }
  const float d = target < 0 || target >= vocab ? NAN : dlosses[t];
  const float row_lse = lse[t];
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float p = expf(to_float(row[j]) - row_lse);
    out[j] = from_float<T>(d * (j == target ? p - 1.0f : p));
  }
}

void check_shape(const char* kernel, DType targets_dtype, const CrossEntropyShape& s) {
  HSPMD_CHECK(s.tokens >= 0 && s.tokens <= 0x7fffffff && s.vocab > 0)
      << kernel << ": need 0 <= tokens < 2^31 and vocab > 0, got tokens " << s.tokens << ", vocab " << s.vocab;
  HSPMD_CHECK(targets_dtype == DType::kInt64 || targets_dtype == DType::kInt32)
      << kernel << ": targets must be int64 or int32, got " << dtype_name(targets_dtype);
}

template <typename F>
void visit_targets(DType targets_dtype, F&& f) {
  if (targets_dtype == DType::kInt64) {
    f(static_cast<int64_t*>(nullptr));
  } else {
    f(static_cast<int32_t*>(nullptr));
  }
}

}  // namespace

void cross_entropy_fwd(DType dtype, const void* logits, DType targets_dtype, const void* targets, float* losses,
                       float* lse, const CrossEntropyShape& s, cudaStream_t stream) {
  const char* kernel = "cuda cross_entropy_fwd";
  check_shape(kernel, targets_dtype, s);
  if (s.tokens == 0) return;
  visit_float_or_bf16(dtype, kernel, "logits", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    visit_targets(targets_dtype, [&](auto* target_tag) {
      using I = std::remove_pointer_t<decltype(target_tag)>;
      cross_entropy_rows<T, I><<<static_cast<unsigned>(s.tokens), device::row_threads(s.vocab), 0, stream>>>(
          static_cast<const T*>(logits), static_cast<const I*>(targets), losses, lse, s.vocab, s.ignore_index);
    });
  });
  check_launch(kernel);
}

void cross_entropy_bwd(DType dtype, const void* logits, DType targets_dtype, const void* targets, const float* lse,
                       const float* dlosses, void* dlogits, const CrossEntropyShape& s, cudaStream_t stream) {
  const char* kernel = "cuda cross_entropy_bwd";
  check_shape(kernel, targets_dtype, s);
  if (s.tokens == 0) return;
  visit_float_or_bf16(dtype, kernel, "logits", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    visit_targets(targets_dtype, [&](auto* target_tag) {
      using I = std::remove_pointer_t<decltype(target_tag)>;
      cross_entropy_grad_rows<T, I><<<static_cast<unsigned>(s.tokens), device::row_threads(s.vocab), 0, stream>>>(
          static_cast<const T*>(logits), static_cast<const I*>(targets), lse, dlosses, static_cast<T*>(dlogits),
          s.vocab, s.ignore_index);
    });
  });
  check_launch(kernel);
}

}  // namespace hspmd::kernels::cuda
