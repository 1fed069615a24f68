#include "hspmd/kernels/cuda/adamw.h"

#include <cmath>

#include "hspmd/kernels/cuda/device_math.cuh"

namespace hspmd::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 4096;  // elements per block: 16 per thread

// Up to kAdamWTensorsPerLaunch tensors, passed by value as the kernel's argument (under 2 KiB).
// Block b works on chunk b - first_block[i] of tensor i, where first_block[i] <= b < first_block[i + 1].
struct TensorPack {
  float* param[kAdamWTensorsPerLaunch];
  const float* grad[kAdamWTensorsPerLaunch];
  float* m[kAdamWTensorsPerLaunch];
  float* v[kAdamWTensorsPerLaunch];
  __nv_bfloat16* param_bf16[kAdamWTensorsPerLaunch];
  int64_t numel[kAdamWTensorsPerLaunch];
  int64_t first_block[kAdamWTensorsPerLaunch + 1];
  int count;
};

struct Coefficients {
  float decay, beta1, beta2, step_size, inv_sqrt_bias2, eps;
  double grad_scale;          // before clipping
  double max_grad_norm;       // 0: no clipping
  const double* sum_of_squares;
};

__device__ __forceinline__ int tensor_of_block(const TensorPack& pack, int64_t block) {
  int i = 0;
  while (block >= pack.first_block[i + 1]) ++i;
  return i;
}

__global__ void sum_of_squares_chunks(TensorPack pack, double* sum) {
  __shared__ float scratch[32];
  const int64_t block = blockIdx.x;
  const int i = tensor_of_block(pack, block);
  const int64_t begin = (block - pack.first_block[i]) * kChunk;
  const int64_t end = min(begin + kChunk, pack.numel[i]);
  const float* g = pack.grad[i];
  float partial = 0.0f;
  for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) partial += g[k] * g[k];
  partial = device::block_sum(partial, scratch);
  if (threadIdx.x == 0) atomicAdd(sum, static_cast<double>(partial));
}

__global__ void adamw_chunks(TensorPack pack, Coefficients c) {
  const int64_t block = blockIdx.x;
  const int i = tensor_of_block(pack, block);
  const int64_t begin = (block - pack.first_block[i]) * kChunk;
  const int64_t end = min(begin + kChunk, pack.numel[i]);
  double scale = c.grad_scale;
  if (c.max_grad_norm > 0) {
    const double norm = sqrt(*c.sum_of_squares);
    if (norm > c.max_grad_norm) scale *= c.max_grad_norm / norm;
  }
  const float grad_scale = static_cast<float>(scale);
  float* p = pack.param[i];
  const float* g = pack.grad[i];
  float* m = pack.m[i];
  float* v = pack.v[i];
  __nv_bfloat16* p16 = pack.param_bf16[i];
  for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) {
    const float gi = g[k] * grad_scale;
    const float mi = c.beta1 * m[k] + (1.0f - c.beta1) * gi;
    const float vi = c.beta2 * v[k] + (1.0f - c.beta2) * gi * gi;
    m[k] = mi;
    v[k] = vi;
    const float pi = p[k] * c.decay - c.step_size * mi / (sqrtf(vi) * c.inv_sqrt_bias2 + c.eps);
    p[k] = pi;
    if (p16 != nullptr) p16[k] = __float2bfloat16_rn(pi);
  }
}

// Calls launch(pack, blocks) for each group of up to kAdamWTensorsPerLaunch non-empty tensors.
template <typename Launch>
void for_each_pack(const char* kernel, std::span<const AdamWTensor> tensors, Launch&& launch) {
  TensorPack pack{};
  auto flush = [&] {
    if (pack.count == 0) return;
    launch(pack, pack.first_block[pack.count]);
    check_launch(kernel);
    pack = TensorPack{};
  };
  for (size_t t = 0; t < tensors.size(); ++t) {
    const AdamWTensor& x = tensors[t];
    HSPMD_CHECK(x.numel >= 0) << kernel << ": tensor " << t << " has " << x.numel << " elements";
    if (x.numel == 0) continue;
    HSPMD_CHECK(x.param != nullptr && x.grad != nullptr && x.m != nullptr && x.v != nullptr)
        << kernel << ": tensor " << t << " lacks a param, grad, m or v pointer";
    const int i = pack.count++;
    pack.param[i] = x.param;
    pack.grad[i] = x.grad;
    pack.m[i] = x.m;
    pack.v[i] = x.v;
    pack.param_bf16[i] = x.param_bf16;
    pack.numel[i] = x.numel;
    pack.first_block[i + 1] = pack.first_block[i] + (x.numel + kChunk - 1) / kChunk;
    if (pack.count == kAdamWTensorsPerLaunch) flush();
  }
  flush();
}

}  // namespace

void add_grad_sum_of_squares(std::span<const AdamWTensor> tensors, double* sum_of_squares, cudaStream_t stream) {
  for_each_pack("cuda grad_sum_of_squares", tensors, [&](const TensorPack& pack, int64_t blocks) {
    sum_of_squares_chunks<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(pack, sum_of_squares);
  });
}

void grad_sum_of_squares(std::span<const AdamWTensor> tensors, double* sum_of_squares, cudaStream_t stream) {
  const cudaError_t cleared = cudaMemsetAsync(sum_of_squares, 0, sizeof(double), stream);
  HSPMD_CHECK(cleared == cudaSuccess) << "cuda grad_sum_of_squares: clearing the sum failed: "
                                      << cudaGetErrorString(cleared);
  add_grad_sum_of_squares(tensors, sum_of_squares, stream);
}

void adamw_step(std::span<const AdamWTensor> tensors, int64_t step, const AdamWOptions& o,
                const AdamWClipping& clipping, cudaStream_t stream) {
  const char* kernel = "cuda adamw_step";
  HSPMD_CHECK(step >= 1) << kernel << ": step counts from 1, got " << step;
  HSPMD_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1)
      << kernel << ": betas must lie in [0, 1), got beta1 " << o.beta1 << ", beta2 " << o.beta2;
  HSPMD_CHECK(o.lr >= 0 && o.eps > 0 && o.weight_decay >= 0)
      << kernel << ": need lr >= 0, eps > 0, weight_decay >= 0; got lr " << o.lr << ", eps " << o.eps
      << ", weight_decay " << o.weight_decay;
  HSPMD_CHECK(std::isfinite(o.grad_scale)) << kernel << ": grad_scale must be finite, got " << o.grad_scale;
  HSPMD_CHECK(clipping.max_grad_norm >= 0 && (clipping.max_grad_norm == 0 || clipping.sum_of_squares != nullptr))
      << kernel << ": clipping at " << clipping.max_grad_norm << " needs max_grad_norm >= 0 and sum_of_squares";
  // The per-step scalars in double, then float, as the CPU kernel computes them.
  const double s = static_cast<double>(step);
  const double bias1 = 1 - std::pow(o.beta1, s);
  const double bias2 = 1 - std::pow(o.beta2, s);
  const Coefficients c{.decay = static_cast<float>(1 - o.lr * o.weight_decay),
                       .beta1 = static_cast<float>(o.beta1),
                       .beta2 = static_cast<float>(o.beta2),
                       .step_size = static_cast<float>(o.lr / bias1),
                       .inv_sqrt_bias2 = static_cast<float>(1 / std::sqrt(bias2)),
                       .eps = static_cast<float>(o.eps),
                       .grad_scale = o.grad_scale,
                       .max_grad_norm = clipping.max_grad_norm,
                       .sum_of_squares = clipping.sum_of_squares};
  for_each_pack(kernel, tensors, [&](const TensorPack& pack, int64_t blocks) {
    adamw_chunks<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(pack, c);
  });
}

}  // namespace hspmd::kernels::cuda
