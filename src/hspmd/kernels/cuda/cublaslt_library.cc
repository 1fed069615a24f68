#include "hspmd/kernels/cuda/cublaslt_library.h"

#include <dlfcn.h>

#include <string>

#include "hspmd/core/error.h"

namespace hspmd::kernels::cuda {

namespace {

CublasLtLibrary load() {
  const std::string soname = HSPMD_CUBLASLT_SONAME;
  const std::string fallback = std::string(HSPMD_CUBLASLT_DIR) + "/" + soname;
  void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string errors;
  if (handle == nullptr) {
    errors = dlerror();
    handle = dlopen(fallback.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  HSPMD_CHECK(handle != nullptr) << "cuBLASLt: cannot load " << soname << " (" << errors << ") nor " << fallback
                                 << " (" << dlerror() << "); put the CUDA toolkit's libraries on LD_LIBRARY_PATH";
  CublasLtLibrary lt;
  auto bind = [&](auto& function, const char* name) {
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(handle, name));
    HSPMD_CHECK(function != nullptr) << "cuBLASLt: " << soname << " has no " << name;
  };
#define HSPMD_BIND(name) bind(lt.name, "cublasLt" #name);
  HSPMD_BIND(Create)
  HSPMD_BIND(Destroy)
  HSPMD_BIND(GetStatusName)
  HSPMD_BIND(GetStatusString)
  HSPMD_BIND(MatmulDescCreate)
  HSPMD_BIND(MatmulDescDestroy)
  HSPMD_BIND(MatmulDescSetAttribute)
  HSPMD_BIND(MatrixLayoutCreate)
  HSPMD_BIND(MatrixLayoutDestroy)
  HSPMD_BIND(MatrixLayoutSetAttribute)
  HSPMD_BIND(MatmulPreferenceCreate)
  HSPMD_BIND(MatmulPreferenceDestroy)
  HSPMD_BIND(MatmulPreferenceSetAttribute)
  HSPMD_BIND(MatmulAlgoGetHeuristic)
  HSPMD_BIND(Matmul)
#undef HSPMD_BIND
  return lt;  // the library stays loaded for the process's life
}

}  // namespace

const CublasLtLibrary& cublaslt_library() {
  static const CublasLtLibrary lt = load();
  return lt;
}

}  // namespace hspmd::kernels::cuda
