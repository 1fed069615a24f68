// The BLAS library behind the CPU matmul and attention kernels: OpenBLAS, loaded by hspmd itself
// (dlopen) at first use, with its kernels chosen from the CPU's features rather than its model name.
//
// Why: OpenBLAS picks its kernels once, when the library initialises, from the CPU's model number.
// Under a VM that hides the model it falls back to its oldest x86-64 kernels ("Prescott"), 5-8x
// slower than the AVX2 or AVX-512 ones the CPU can run. OpenBLAS does honour OPENBLAS_CORETYPE, but
// only at initialisation, which for a library linked in the usual way happens before main(). So
// hspmd does not link OpenBLAS: the first kernel that needs it sets OPENBLAS_CORETYPE from the
// instruction sets the CPU (and the OS) support, loads the library, and restores the environment.
// A user's own OPENBLAS_CORETYPE is left alone and wins. A program that links a library needing
// OpenBLAS (`hspmd` itself: the planner's CoinUtils needs LAPACK) has it loaded before main(), and
// then OpenBLAS's own choice stands (BlasLibrary::loaded_before).
//
//   const auto& blas = kernels::blas_library();
//   std::printf("%s\n", blas.describe().c_str());   // "OpenBLAS 0.3.21 ... kernels SkylakeX (...)"
#pragma once

#include <string>

namespace hspmd::kernels {

// What the CPU and the OS support, as far as the choice of BLAS kernels goes.
struct CpuFeatures {
  bool avx = false, avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool amd = false;  // vendor: OpenBLAS has its own (Haswell-equivalent) names for AMD's AVX2 cores

  static CpuFeatures detect();  // of the CPU this process runs on
};

// OpenBLAS's core type (an OPENBLAS_CORETYPE value) for these features: "SkylakeX" (AVX-512 F, BW,
// DQ, VL), "Zen" or "Haswell" (AVX2 + FMA), "Sandybridge" (AVX), or "" to let OpenBLAS decide.
std::string openblas_core_for(const CpuFeatures& features);

// The loaded library: entry points and what it reported about itself.
struct BlasLibrary {
  using Sgemm = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                         int lda, const float* b, int ldb, float beta, float* c, int ldc);
  using Dgemm = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, double alpha, const double* a,
                         int lda, const double* b, int ldb, double beta, double* c, int ldc);
  Sgemm sgemm = nullptr;  // cblas_sgemm
  Dgemm dgemm = nullptr;  // cblas_dgemm
  void (*set_num_threads)(int) = nullptr;
  int (*get_num_threads)() = nullptr;

  std::string path;           // the file that was loaded
  std::string config;         // openblas_get_config(): version and build options
  std::string core;           // openblas_get_corename(): the kernels in use
  std::string requested_core; // the OPENBLAS_CORETYPE in force at load ("" when none)
  bool requested_by_user = false;  // OPENBLAS_CORETYPE came from the environment, not from hspmd
  // OpenBLAS was in the process before hspmd loaded it (a linked library needs it): it chose its
  // kernels from the environment at startup, and requested_core, when hspmd's, did not apply.
  bool loaded_before = false;

  std::string describe() const;  // one line for logs and `hspmd selfcheck`
};

// Loads the library on first call (thread-safe); throws hspmd::Error when it cannot be loaded.
const BlasLibrary& blas_library();

// OpenBLAS's thread count: applied now when the library is loaded, else when it loads. A process
// that runs only float32 kernels never loads it, so its thread pool never competes for the cores.
void set_blas_num_threads(int n);

}  // namespace hspmd::kernels
