// Internal to the CPU backend: one overloaded row-major GEMM entry, so float and double kernels share
// templated code. float goes to oneDNN (or OpenBLAS, see kernels/gemm_backend.h), double to OpenBLAS
// (loaded at run time by blas_library.h, which picks its kernels).
//
//   // C[M, N] = alpha * A[M, K] @ B[N, K]^T + beta * C   (rows of A lda apart, of B ldb apart)
//   gemm(false, true, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
//
// Leading dimensions are strides between rows, so a tile of one head inside a [T, Nh, D] tensor
// is addressed in place with ld = Nh * D (no copy).
#pragma once

#include <cblas.h>  // the CBLAS enums only: the functions come from blas_library()

#include <cstdint>

#include "hspmd/kernels/blas_library.h"
#include "hspmd/kernels/gemm_backend.h"

namespace hspmd::kernels::cpu {

// OpenBLAS runs a GEMM on one thread when M * N * K <= 65536 * GEMM_MULTITHREAD_THRESHOLD (4 in the
// Debian build). Tiles inside our own OpenMP regions stay below this so OpenBLAS never starts its
// threads there (which would oversubscribe the cores). oneDNN, on OpenMP, runs on the calling
// thread inside a parallel region by itself.
inline constexpr int64_t kSingleThreadedGemmWork = 65536 * 4;

inline void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (float32_gemm() == Float32Gemm::kOneDnn) {
    onednn_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  blas_library().sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// bf16 operands, float32 result: oneDNN's bf16 kernels (only when bf16_gemm() chose them).
inline void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
                 int64_t lda, const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  onednn_gemm_bf16(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

inline void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                 int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  blas_library().dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

}  // namespace hspmd::kernels::cpu
