#include "hspmd/kernels/cuda/rope.h"

#include "hspmd/kernels/cuda/device_math.cuh"

namespace hspmd::kernels::cuda {

namespace {

using device::from_float;
using device::to_float;

// One thread per (token, frequency i): the angle once, then the pair (i, i + D/2) of every head.
// direction is +1 (forward) or -1 (backward: the inverse rotation).
template <typename T, typename P>
__global__ void rope_pairs(const T* x, const P* positions, const double* inv_freq, T* y, int64_t tokens, int64_t heads,
                           int64_t head_dim, double direction) {
  const int64_t half = head_dim / 2;
  const int64_t pairs = tokens * half;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < pairs;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = k / half, i = k % half;
    double s = 0, c = 0;
    sincos(static_cast<double>(positions[t]) * inv_freq[i] * direction, &s, &c);
    const float sf = static_cast<float>(s), cf = static_cast<float>(c);
    for (int64_t n = 0; n < heads; ++n) {
      const int64_t base = (t * heads + n) * head_dim;
      const float x1 = to_float(x[base + i]), x2 = to_float(x[base + i + half]);
      y[base + i] = from_float<T>(x1 * cf - x2 * sf);
      y[base + i + half] = from_float<T>(x2 * cf + x1 * sf);
    }
  }
}

void rope(const char* kernel, DType dtype, const void* x, DType positions_dtype, const void* positions,
          const double* inv_freq, void* y, const RopeShape& s, double direction, cudaStream_t stream) {
  HSPMD_CHECK(s.tokens >= 0 && s.heads > 0 && s.head_dim > 0 && s.head_dim % 2 == 0)
      << kernel << ": need tokens >= 0, heads > 0 and an even head_dim > 0; got tokens " << s.tokens << ", heads "
      << s.heads << ", head_dim " << s.head_dim;
  HSPMD_CHECK(positions_dtype == DType::kInt64 || positions_dtype == DType::kInt32)
      << kernel << ": positions must be int64 or int32, got " << dtype_name(positions_dtype);
  if (s.tokens == 0) return;
  const int threads = 256;
  const unsigned blocks = device::grid_for(s.tokens * (s.head_dim / 2), threads);
  visit_float_or_bf16(dtype, kernel, "x", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (positions_dtype == DType::kInt64) {
      rope_pairs<T, int64_t><<<blocks, threads, 0, stream>>>(static_cast<const T*>(x),
                                                              static_cast<const int64_t*>(positions), inv_freq,
                                                              static_cast<T*>(y), s.tokens, s.heads, s.head_dim, direction);
    } else {
      rope_pairs<T, int32_t><<<blocks, threads, 0, stream>>>(static_cast<const T*>(x),
                                                              static_cast<const int32_t*>(positions), inv_freq,
                                                              static_cast<T*>(y), s.tokens, s.heads, s.head_dim, direction);
    }
  });
  check_launch(kernel);
}

}  // namespace

void rope_fwd(DType dtype, const void* x, DType positions_dtype, const void* positions, const double* inv_freq,
              void* y, const RopeShape& shape, cudaStream_t stream) {
  rope("cuda rope_fwd", dtype, x, positions_dtype, positions, inv_freq, y, shape, 1.0, stream);
}

void rope_bwd(DType dtype, const void* dy, DType positions_dtype, const void* positions, const double* inv_freq,
              void* dx, const RopeShape& shape, cudaStream_t stream) {
  rope("cuda rope_bwd", dtype, dy, positions_dtype, positions, inv_freq, dx, shape, -1.0, stream);
}

}  // namespace hspmd::kernels::cuda
