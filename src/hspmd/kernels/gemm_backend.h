// Which library computes the CPU GEMMs (matmul and attention's tiles), for logs and
// `hspmd selfcheck`:
//   float32  oneDNN's sgemm: JIT-generated kernels for the widest instruction set the CPU has
//            (AVX2, AVX-512, ...), chosen at run time from CPUID; threads from OpenMP, so inside
//            the kernels' own parallel regions it runs on the calling thread.
//   float64  OpenBLAS (kernels/blas_library.h), the accurate oracle path.
// Measured on a 2-core AVX2 VM: oneDNN's sgemm was the fastest of oneDNN, OpenBLAS (its Zen/Haswell
// kernels) and BLIS at training sizes and at attention's 64 x 64 tiles (docs/cpu-kernels.md).
// HSPMD_GEMM=openblas (or set_float32_gemm) sends float32 to OpenBLAS too, for comparisons.
#pragma once

#include <cstdint>
#include <string>

#include "hspmd/core/bfloat16.h"

namespace hspmd::kernels {

enum class Float32Gemm { kOneDnn, kOpenBlas };

// The float32 GEMM library in use: HSPMD_GEMM (onednn or openblas, read at first use), else oneDNN.
Float32Gemm float32_gemm();
void set_float32_gemm(Float32Gemm backend);  // between kernels, not while they run
const char* float32_gemm_name(Float32Gemm backend);  // "onednn", "openblas"

// A product below this many multiply-adds (~0.1 ms on one core) runs on one thread, where oneDNN's
// fork/join would cost more than the second thread gives; a higher bound leaves a small model's
// products to one core (the measurements: docs/cpu-kernels.md, "GEMM").
inline constexpr int64_t kMinParallelGemmMacs = int64_t{1} << 22;

// Row-major C[M, N] = alpha op(A) op(B) + beta C through oneDNN, as cblas_sgemm takes it.
void onednn_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// bf16 GEMMs (a bf16 matmul with float32 accumulation, what --precision bf16 computes): on a CPU
// with bf16 dot-product instructions (AVX-512 BF16, AMX) oneDNN's bf16 matmul kernels run them
// at up to twice the float32 rate; elsewhere the operands are rounded to bf16 in float32 storage and
// multiplied by the float32 GEMM, which computes the same products exactly (kernels/bf16_rounding.h).
//   HSPMD_BF16_GEMM=onednn|float32 (read at first use) or set_bf16_gemm forces one.
enum class Bf16Gemm { kOneDnn, kFloat32 };
Bf16Gemm bf16_gemm();
void set_bf16_gemm(Bf16Gemm backend);  // between kernels; kOneDnn needs onednn_has_bf16_kernels()
const char* bf16_gemm_name(Bf16Gemm backend);  // "onednn", "float32"
bool onednn_has_bf16_kernels();  // oneDNN's instruction set has bf16 dot products

// Row-major C[M, N] = alpha op(A) op(B) + beta C with bf16 A and B and float32 C, on oneDNN's bf16
// matmul. One primitive per shape, created on first use and cached (a few hundred microseconds).
void onednn_gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
                      int64_t lda, const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc);

// "float32: oneDNN 2.6.3 sgemm, JIT for avx2; float64: OpenBLAS (...), kernels Zen (...)", naming the
// float32 library in use.
std::string gemm_backend_description();

// The instruction set oneDNN generates its kernels for, e.g. "avx2", "avx512_core", "avx512_core_amx".
std::string onednn_isa();

}  // namespace hspmd::kernels
