// The row loops (cpu/simd/row_ops.inc) at SIMD level scalar: 1 float lane(s) per vector.
// CMakeLists.txt gives this file the compiler flags of its instruction set.
#define HSPMD_SIMD_LANES 1
#define HSPMD_SIMD_TABLE kRowOpsScalar
#define HSPMD_SIMD_LEVEL SimdLevel::kScalar
#include "hspmd/kernels/cpu/simd/row_ops.inc"
