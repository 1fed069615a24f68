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

namespace hspmd::kernels {

enum class Float32Gemm { kOneDnn, kOpenBlas };

// The float32 GEMM library in use: HSPMD_GEMM (onednn or openblas, read at first use), else oneDNN.
Float32Gemm float32_gemm();
void set_float32_gemm(Float32Gemm backend);  // between kernels, not while they run
const char* float32_gemm_name(Float32Gemm backend);  // "onednn", "openblas"

// Row-major C[M, N] = alpha op(A) op(B) + beta C through oneDNN, as cblas_sgemm takes it.
void onednn_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// "float32: oneDNN 2.6.3 sgemm, JIT for avx2; float64: OpenBLAS (...), kernels Zen (...)", naming the
// float32 library in use.
std::string gemm_backend_description();

// The instruction set oneDNN generates its kernels for, e.g. "avx2", "avx512_core", "avx512_core_amx".
std::string onednn_isa();

}  // namespace hspmd::kernels
