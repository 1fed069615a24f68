// cuBLASLt, loaded (dlopen) at the first GEMM rather than linked. Why: the library is 540 MB and
// loading it costs about 0.2 s at every start of a program that links it (an empty program linked
// to libcublasLt.so.13 took 0.21-0.27 s here, 0.00 s without), which every `hspmd` command would
// pay because `hspmd selfcheck` can run a GEMM on a GPU.
//
// The library is looked up by its soname (libcublasLt.so.<CUDA major>: LD_LIBRARY_PATH, the
// program's run path, the system's), then in the directory the build found it in.
//
//   const CublasLtLibrary& lt = cublaslt_library();   // throws Error naming the paths tried
//   lt.Create(&handle);
#pragma once

#include <cublasLt.h>

namespace hspmd::kernels::cuda {

struct CublasLtLibrary {
#define HSPMD_CUBLASLT_FUNCTION(name) decltype(&cublasLt##name) name = nullptr;
  HSPMD_CUBLASLT_FUNCTION(Create)
  HSPMD_CUBLASLT_FUNCTION(Destroy)
  HSPMD_CUBLASLT_FUNCTION(GetStatusName)
  HSPMD_CUBLASLT_FUNCTION(GetStatusString)
  HSPMD_CUBLASLT_FUNCTION(MatmulDescCreate)
  HSPMD_CUBLASLT_FUNCTION(MatmulDescDestroy)
  HSPMD_CUBLASLT_FUNCTION(MatmulDescSetAttribute)
  HSPMD_CUBLASLT_FUNCTION(MatrixLayoutCreate)
  HSPMD_CUBLASLT_FUNCTION(MatrixLayoutDestroy)
  HSPMD_CUBLASLT_FUNCTION(MatrixLayoutSetAttribute)
  HSPMD_CUBLASLT_FUNCTION(MatmulPreferenceCreate)
  HSPMD_CUBLASLT_FUNCTION(MatmulPreferenceDestroy)
  HSPMD_CUBLASLT_FUNCTION(MatmulPreferenceSetAttribute)
  HSPMD_CUBLASLT_FUNCTION(MatmulAlgoGetHeuristic)
  HSPMD_CUBLASLT_FUNCTION(Matmul)
#undef HSPMD_CUBLASLT_FUNCTION
};

// Loaded once per process (thread-safe); later calls return the same table.
const CublasLtLibrary& cublaslt_library();

}  // namespace hspmd::kernels::cuda
