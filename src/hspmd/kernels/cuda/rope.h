// Rotary position embedding on a CUDA device, the math of kernels/rope.h (rotate-half) on device
// pointers. x, y [tokens, heads, head_dim] of `dtype` (float32 or bfloat16 storage); positions
// [tokens] int64 or int32 (positions_dtype); inv_freq [head_dim / 2] float64 on the device (the
// caller uploads the model's frequencies once). The angles are computed in float64, as on the CPU,
// so long positions keep their precision; each (token, frequency) pair is rotated once for every
// head. The backward is the rotation by -angle. y may be x.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "hspmd/core/dtype.h"

namespace hspmd::kernels::cuda {

struct RopeShape {
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;  // even
};

void rope_fwd(DType dtype, const void* x, DType positions_dtype, const void* positions, const double* inv_freq,
              void* y, const RopeShape& shape, cudaStream_t stream);
void rope_bwd(DType dtype, const void* dy, DType positions_dtype, const void* positions, const double* inv_freq,
              void* dx, const RopeShape& shape, cudaStream_t stream);

}  // namespace hspmd::kernels::cuda
