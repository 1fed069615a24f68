// The row loops (cpu/simd/row_ops.inc) at SIMD level avx512: 16 float lane(s) per vector.
// CMakeLists.txt gives this file the compiler flags of its instruction set.
#define HSPMD_SIMD_LANES 16
#define HSPMD_SIMD_TABLE kRowOpsAvx512
#define HSPMD_SIMD_LEVEL SimdLevel::kAvx512
#include "hspmd/kernels/cpu/simd/row_ops.inc"
