// gemm_backend (kernels/gemm_backend.h): what oneDNN and OpenBLAS report about themselves.
#include "hspmd/kernels/gemm_backend.h"

#include <oneapi/dnnl/dnnl.h>

#include <atomic>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "hspmd/core/error.h"
#include "hspmd/kernels/blas_library.h"
#include "hspmd/kernels/threading.h"

namespace hspmd::kernels {
namespace {

std::atomic<int> g_float32_gemm{-1};  // -1 until the first use reads HSPMD_GEMM

Float32Gemm float32_gemm_from_environment() {
  const char* name = std::getenv("HSPMD_GEMM");
  if (name == nullptr || *name == '\0' || std::string_view(name) == "onednn") return Float32Gemm::kOneDnn;
  HSPMD_CHECK(std::string_view(name) == "openblas") << "HSPMD_GEMM=" << name << ": expected onednn or openblas";
  return Float32Gemm::kOpenBlas;
}

constexpr int64_t kMinParallelGemmMacs = int64_t{1} << 26;

}  // namespace

Float32Gemm float32_gemm() {
  int v = g_float32_gemm.load(std::memory_order_acquire);
  if (v < 0) {
    int expected = -1;
    g_float32_gemm.compare_exchange_strong(expected, static_cast<int>(float32_gemm_from_environment()));
    v = g_float32_gemm.load(std::memory_order_acquire);
  }
  return static_cast<Float32Gemm>(v);
}

void set_float32_gemm(Float32Gemm backend) {
  g_float32_gemm.store(static_cast<int>(backend), std::memory_order_release);
}

const char* float32_gemm_name(Float32Gemm backend) { return backend == Float32Gemm::kOneDnn ? "onednn" : "openblas"; }

void onednn_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  // A product below kMinParallelGemmMacs multiply-adds (~1 ms on one core) runs on one thread:
  // llama-tiny's projections (1024 x 352 x 128 and smaller) spent more time in oneDNN's fork/join
  // than in arithmetic on a loaded 2-core host.
  std::optional<ScopedNumThreads> serial;
  if (m * n * k < kMinParallelGemmMacs) serial.emplace(1);
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
  return "float32: " + (float32_gemm() == Float32Gemm::kOneDnn ? onednn : std::string("OpenBLAS (HSPMD_GEMM)")) +
         "; float64: " + blas_library().describe();
}

}  // namespace hspmd::kernels
