#include "hspmd/kernels/cuda/cross_entropy.h"

#include "hspmd/kernels/cuda/device_math.cuh"

namespace hspmd::kernels::cuda {

namespace {

using device::from_float;
using device::to_float;

// The logit the loss sees: soft-capped when cap > 0.
__device__ inline float capped(float z, float cap) { return cap > 0.0f ? cap * tanhf(z / cap) : z; }

// The block's row: its largest capped logit, and the sum of exp(logit - that) over the row.
template <typename T>
__device__ void row_max_and_exp_sum(const T* row, int64_t vocab, float cap, float* scratch, float& max, float& sum) {
  max = -INFINITY;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) max = fmaxf(max, capped(to_float(row[j]), cap));
  max = device::block_max(max, scratch);
  sum = 0.0f;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) sum += expf(capped(to_float(row[j]), cap) - max);
  sum = device::block_sum(sum, scratch);
}

// One block per token: the row's max, then the sum of exp(logit - max).
template <typename T, typename I>
__global__ void cross_entropy_rows(const T* logits, const I* targets, float* losses, float* lse, int64_t vocab,
                                   int64_t ignore_index, float cap) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const T* row = logits + t * vocab;
  float max = 0.0f;
  float sum = 0.0f;
  row_max_and_exp_sum(row, vocab, cap, scratch, max, sum);
  if (threadIdx.x != 0) return;
  const float row_lse = max + logf(sum);
  lse[t] = row_lse;
  const int64_t target = static_cast<int64_t>(targets[t]);
  if (target == ignore_index) {
    losses[t] = 0.0f;
  } else if (target < 0 || target >= vocab) {
    losses[t] = NAN;
  } else {
    losses[t] = row_lse - capped(to_float(row[target]), cap);
  }
}

// One block per token: this shard's max, sum of exp(logit - max), and the target's logit if held.
template <typename T, typename I>
__global__ void shard_stats_rows(const T* logits, const I* targets, double* stats, int64_t stride, int64_t vocab,
                                 int64_t vocab_start, int64_t width, int64_t ignore_index, float cap) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const T* row = logits + t * vocab;
  float max = 0.0f;
  float sum = 0.0f;
  row_max_and_exp_sum(row, vocab, cap, scratch, max, sum);
  if (threadIdx.x != 0) return;
  const int64_t target = static_cast<int64_t>(targets[t]);
  const int64_t local = target - vocab_start;
  double target_logit = 0.0;
  if (target != ignore_index && (target < 0 || target >= width)) {
    target_logit = NAN;
  } else if (target != ignore_index && local >= 0 && local < vocab) {
    target_logit = capped(to_float(row[local]), cap);
  }
  stats[t] = max;
  stats[stride + t] = sum;
  stats[2 * stride + t] = target_logit;
}

// lse is the whole row's; this shard's columns start at vocab_start of a row `width` wide.
template <typename T, typename I>
__global__ void cross_entropy_grad_rows(const T* logits, const I* targets, const float* lse, const float* dlosses,
                                        T* dlogits, int64_t vocab, int64_t vocab_start, int64_t width,
                                        int64_t ignore_index, float cap) {
  const int64_t t = blockIdx.x;
  const T* row = logits + t * vocab;
  T* out = dlogits + t * vocab;
  const int64_t target = static_cast<int64_t>(targets[t]);
  if (target == ignore_index) {
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) out[j] = from_float<T>(0.0f);
    return;
  }
  const float d = target < 0 || target >= width ? NAN : dlosses[t];
  const int64_t local = target - vocab_start;
  const float row_lse = lse[t];
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float z = capped(to_float(row[j]), cap);
    const float p = expf(z - row_lse);
    // d capped / d z = 1 - tanh^2(z / cap) = 1 - (capped / cap)^2.
    const float chain = cap > 0.0f ? 1.0f - (z / cap) * (z / cap) : 1.0f;
    out[j] = from_float<T>(d * (j == local ? p - 1.0f : p) * chain);
  }
}

// One block: a float64 sum of every loss, times the scale.
__global__ void scaled_sum_block(const float* losses, int64_t n, const float* scale, float* out) {
  __shared__ double partial[256];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += losses[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = static_cast<float>(static_cast<double>(scale[0]) * partial[0]);
}

__global__ void product_broadcast(const float* a, const float* b, float* out, int64_t n) {
  const float value = a[0] * b[0];
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = value;
  }
}

// The row's whole width: vocab_size when the logits are one shard of it, else their own.
int64_t check_shape(const char* kernel, DType targets_dtype, const CrossEntropyShape& s) {
  HSPMD_CHECK(s.tokens >= 0 && s.tokens <= 0x7fffffff && s.vocab > 0)
      << kernel << ": need 0 <= tokens < 2^31 and vocab > 0, got tokens " << s.tokens << ", vocab " << s.vocab;
  HSPMD_CHECK(targets_dtype == DType::kInt64 || targets_dtype == DType::kInt32)
      << kernel << ": targets must be int64 or int32, got " << dtype_name(targets_dtype);
  if (s.vocab_size == 0 && s.vocab_start == 0) return s.vocab;
  HSPMD_CHECK(s.vocab_start >= 0 && s.vocab_start + s.vocab <= s.vocab_size)
      << kernel << ": a shard of " << s.vocab << " columns from " << s.vocab_start << " does not fit a vocabulary of "
      << s.vocab_size;
  return s.vocab_size;
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

void scaled_loss_sum(const float* losses, int64_t tokens, const float* loss_scale, float* loss, cudaStream_t stream) {
  const char* kernel = "cuda scaled_loss_sum";
  HSPMD_CHECK(tokens >= 0) << kernel << ": negative token count " << tokens;
  scaled_sum_block<<<1, 256, 0, stream>>>(losses, tokens, loss_scale, loss);
  check_launch(kernel);
}

void token_loss_grads(const float* loss_scale, const float* dloss, float* dlosses, int64_t tokens,
                      cudaStream_t stream) {
  const char* kernel = "cuda token_loss_grads";
  HSPMD_CHECK(tokens >= 0) << kernel << ": negative token count " << tokens;
  if (tokens == 0) return;
  product_broadcast<<<device::grid_for(tokens, 256), 256, 0, stream>>>(loss_scale, dloss, dlosses, tokens);
  check_launch(kernel);
}

void cross_entropy_fwd(DType dtype, const void* logits, DType targets_dtype, const void* targets, float* losses,
                       float* lse, const CrossEntropyShape& s, cudaStream_t stream) {
  const char* kernel = "cuda cross_entropy_fwd";
  HSPMD_CHECK(check_shape(kernel, targets_dtype, s) == s.vocab)
      << kernel << ": the logits hold a shard of the vocabulary (columns from " << s.vocab_start << " of "
      << s.vocab_size << "); its loss needs every shard's statistics (cuda cross_entropy_shard_stats)";
  if (s.tokens == 0) return;
  visit_float_or_bf16(dtype, kernel, "logits", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    visit_targets(targets_dtype, [&](auto* target_tag) {
      using I = std::remove_pointer_t<decltype(target_tag)>;
      cross_entropy_rows<T, I><<<static_cast<unsigned>(s.tokens), device::row_threads(s.vocab), 0, stream>>>(
          static_cast<const T*>(logits), static_cast<const I*>(targets), losses, lse, s.vocab, s.ignore_index,
          static_cast<float>(s.softcap));
    });
  });
  check_launch(kernel);
}

void cross_entropy_bwd(DType dtype, const void* logits, DType targets_dtype, const void* targets, const float* lse,
                       const float* dlosses, void* dlogits, const CrossEntropyShape& s, cudaStream_t stream) {
  const char* kernel = "cuda cross_entropy_bwd";
  const int64_t width = check_shape(kernel, targets_dtype, s);
  if (s.tokens == 0) return;
  visit_float_or_bf16(dtype, kernel, "logits", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    visit_targets(targets_dtype, [&](auto* target_tag) {
      using I = std::remove_pointer_t<decltype(target_tag)>;
      cross_entropy_grad_rows<T, I><<<static_cast<unsigned>(s.tokens), device::row_threads(s.vocab), 0, stream>>>(
          static_cast<const T*>(logits), static_cast<const I*>(targets), lse, dlosses, static_cast<T*>(dlogits),
          s.vocab, s.vocab_start, width, s.ignore_index, static_cast<float>(s.softcap));
    });
  });
  check_launch(kernel);
}

void cross_entropy_shard_stats(DType dtype, const void* logits, DType targets_dtype, const void* targets,
                               double* stats, int64_t stride, const CrossEntropyShape& s, cudaStream_t stream) {
  const char* kernel = "cuda cross_entropy_shard_stats";
  const int64_t width = check_shape(kernel, targets_dtype, s);
  HSPMD_CHECK(stride >= s.tokens) << kernel << ": a stride of " << stride << " between the statistics' rows is less "
                                  << "than the " << s.tokens << " tokens";
  if (s.tokens == 0) return;
  visit_float_or_bf16(dtype, kernel, "logits", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    visit_targets(targets_dtype, [&](auto* target_tag) {
      using I = std::remove_pointer_t<decltype(target_tag)>;
      shard_stats_rows<T, I><<<static_cast<unsigned>(s.tokens), device::row_threads(s.vocab), 0, stream>>>(
          static_cast<const T*>(logits), static_cast<const I*>(targets), stats, stride, s.vocab, s.vocab_start, width,
          s.ignore_index, static_cast<float>(s.softcap));
    });
  });
  check_launch(kernel);
}

}  // namespace hspmd::kernels::cuda
