// gemm_backend (kernels/gemm_backend.h): what oneDNN and OpenBLAS report about themselves.
#include "hspmd/kernels/gemm_backend.h"

#include <oneapi/dnnl/dnnl.h>

#include <cstdlib>
#include <optional>
#include <string_view>

#include "hspmd/core/error.h"
#include "hspmd/kernels/blas_library.h"
#include "hspmd/kernels/cpu/environment_choice.h"
#include "hspmd/kernels/threading.h"

namespace hspmd::kernels {
namespace {

Float32Gemm float32_gemm_from_environment() {
  const char* name = std::getenv("HSPMD_GEMM");
  if (name == nullptr || *name == '\0' || std::string_view(name) == "onednn") return Float32Gemm::kOneDnn;
  HSPMD_CHECK(std::string_view(name) == "openblas") << "HSPMD_GEMM=" << name << ": expected onednn or openblas";
  return Float32Gemm::kOpenBlas;
}

cpu::EnvironmentChoice<Float32Gemm> g_float32_gemm{float32_gemm_from_environment};  // HSPMD_GEMM

}  // namespace

Float32Gemm float32_gemm() { return g_float32_gemm.get(); }

void set_float32_gemm(Float32Gemm backend) { g_float32_gemm.set(backend); }

const char* float32_gemm_name(Float32Gemm backend) { return backend == Float32Gemm::kOneDnn ? "onednn" : "openblas"; }

void onednn_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  std::optional<ScopedNumThreads> serial;
  if (m * n * k < kMinParallelGemmMacs) {
    serial.emplace(1);
  } else {
    check_not_in_inactive_region("oneDNN sgemm");
  }
  // dnnl_sgemm is row-major, like the rest of hspmd.
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb,
                                          beta, c, ldc);
  HSPMD_CHECK(status == dnnl_success) << "oneDNN sgemm failed (status " << static_cast<int>(status) << ") for M " << m
                                      << " N " << n << " K " << k;
}

std::string onednn_isa() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "isa 0x" + std::to_string(static_cast<int>(dnnl_get_effective_cpu_isa()));
  }
}

std::string gemm_backend_description() {
  const dnnl_version_t* v = dnnl_version();
  const std::string onednn = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                             std::to_string(v->patch) + " sgemm, JIT for " + onednn_isa();
  const std::string bf16 = bf16_gemm() == Bf16Gemm::kOneDnn ? "oneDNN bf16 matmul"
                                                             : "bf16-rounded operands on the float32 GEMM";
  return "float32: " + (float32_gemm() == Float32Gemm::kOneDnn ? onednn : std::string("OpenBLAS (HSPMD_GEMM)")) +
         "; bf16: " + bf16 + "; float64: " + blas_library().describe();
}

}  // namespace hspmd::kernels
