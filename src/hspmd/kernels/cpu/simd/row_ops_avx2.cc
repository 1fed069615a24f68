// The row loops (cpu/simd/row_ops.inc) at SIMD level avx2: 8 float lane(s) per vector.
// CMakeLists.txt gives this file the compiler flags of its instruction set.
#define HSPMD_SIMD_LANES 8
#define HSPMD_SIMD_TABLE kRowOpsAvx2
#define HSPMD_SIMD_LEVEL SimdLevel::kAvx2
#include "hspmd/kernels/cpu/simd/row_ops.inc"
