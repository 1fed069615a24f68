// Copies between regions of tensors on a CUDA device (kernels/slice.h on device pointers): the
// building blocks of resharding. No kernel: each box is planned as at most 3-D strided copies
// (core/region_copy.h) that the copy engine runs (cudaMemcpy2DAsync / cudaMemcpy3DAsync).
//
//   copy_region(src, {3, 8}, {0, 4}, dst, {6, 4}, {2, 0}, {3, 4}, dtype, stream)
//       copies the box src[0:3, 4:8] into dst[2:5, 0:4]
//   slice(x, {B, S, H}, 2, 128, 64, out, dtype, stream)      out = x[:, :, 128:192]
//   concat({a, b}, {{2, 3}, {5, 3}}, 0, out, dtype, stream)   out [7, 3] = [a; b]
//
// Any dtype; shapes are row-major and the buffers contiguous. Queued on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "hspmd/core/dtype.h"

namespace hspmd::kernels::cuda {

using Dims = std::vector<int64_t>;

void copy_region(const void* src, const Dims& src_shape, const Dims& src_starts, void* dst, const Dims& dst_shape,
                 const Dims& dst_starts, const Dims& extents, DType dtype, cudaStream_t stream);
void slice(const void* x, const Dims& shape, int dim, int64_t start, int64_t length, void* out, DType dtype,
           cudaStream_t stream);
void concat(const std::vector<const void*>& inputs, const std::vector<Dims>& shapes, int dim, void* out, DType dtype,
            cudaStream_t stream);

}  // namespace hspmd::kernels::cuda
