// Rounding float32 values to the nearest bfloat16, kept in float32 storage.
//
// This is how bf16 mixed precision computes on a CPU without bf16 arithmetic (docs/mixed-precision.md):
// a matmul or attention whose operands are "bf16" rounds each operand once with this kernel and
// then multiplies in float32. The product of two bfloat16 values (8-bit significands) is exact in
// float32 (24 bits), so a float32 GEMM over rounded operands computes what a bf16 GEMM with float32
// accumulation computes, up to the order of the additions.
//
//   round_to_bfloat16(x, out);   // out[i] = float(BFloat16(x[i])); out may be x itself
#pragma once

#include <cstdint>

#include "hspmd/core/bfloat16.h"
#include "hspmd/core/tensor.h"

namespace hspmd::kernels {

// x and out float32 of one shape; ties round to even, NaN stays NaN, infinities stay.
void round_to_bfloat16(const Tensor& x, const Tensor& out);
// The same on n contiguous floats (src == dst allowed); multi-threaded for large n.
void round_to_bfloat16(const float* src, float* dst, int64_t n);
// The same rounding into bfloat16 storage (for GEMM kernels that take bf16 operands).
void to_bfloat16(const float* src, BFloat16* dst, int64_t n);

}  // namespace hspmd::kernels
