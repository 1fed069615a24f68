// bf16 GEMMs on oneDNN's bf16 matmul (kernels/gemm_backend.h), and the choice between them and
// rounded operands on the float32 GEMM.
#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include "hspmd/core/error.h"
#include "hspmd/kernels/cpu/environment_choice.h"
#include "hspmd/kernels/gemm_backend.h"
#include "hspmd/kernels/threading.h"

namespace hspmd::kernels {
namespace {

Bf16Gemm bf16_gemm_from_environment() {
  const char* name = std::getenv("HSPMD_BF16_GEMM");
  if (name == nullptr || *name == '\0') {
    return onednn_has_bf16_kernels() && float32_gemm() == Float32Gemm::kOneDnn ? Bf16Gemm::kOneDnn
                                                                                : Bf16Gemm::kFloat32;
  }
  if (std::string_view(name) == "float32") return Bf16Gemm::kFloat32;
  HSPMD_CHECK(std::string_view(name) == "onednn") << "HSPMD_BF16_GEMM=" << name << ": expected onednn or float32";
  HSPMD_CHECK(onednn_has_bf16_kernels()) << "HSPMD_BF16_GEMM=onednn: oneDNN has no bf16 kernels for this CPU (its "
                                         << "instruction set is " << onednn_isa() << ")";
  return Bf16Gemm::kOneDnn;
}

cpu::EnvironmentChoice<Bf16Gemm> g_bf16_gemm{bf16_gemm_from_environment};  // HSPMD_BF16_GEMM

// What identifies a primitive: the shape, the layouts and the scalars baked into it.
using PrimitiveKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float>;

// Row-major [rows, cols] with `ld` between rows, or its transpose stored that way.
dnnl::memory::desc matrix(int64_t rows, int64_t cols, int64_t ld, bool transposed, dnnl::memory::data_type type) {
  const dnnl::memory::dims strides = transposed ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1};
  return dnnl::memory::desc({rows, cols}, type, strides);
}

// A matmul primitive with the layouts of its operands.
struct Bf16Matmul {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c, scratchpad;
};

class Bf16Matmuls {
 public:
  // The primitive for one key, created on first use. Primitives are safe to execute from several
  // threads at once (ranks as threads share them).
  Bf16Matmul get(const PrimitiveKey& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    // Variable-length batches make new shapes; a bounded cache keeps memory bounded.
    if (cache_.size() >= kMaxPrimitives) cache_.clear();
    const auto [trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta] = key;
    using dt = dnnl::memory::data_type;
    dnnl::primitive_attr attr;
    // The library's own scratchpad is one per primitive, so two threads (ranks as threads) running
    // one primitive would share it; each call brings its own instead.
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    Bf16Matmul mm;
    mm.a = matrix(m, k, lda, trans_a, dt::bf16);
    mm.b = matrix(k, n, ldb, trans_b, dt::bf16);
    mm.c = matrix(m, n, ldc, false, dt::f32);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(mm.a, mm.b, mm.c), attr, engine_);
    mm.primitive = dnnl::matmul(pd);
    mm.scratchpad = pd.scratchpad_desc();
    return cache_.emplace(key, mm).first->second;
  }
  const dnnl::engine& engine() const { return engine_; }

 private:
  static constexpr size_t kMaxPrimitives = 1024;
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  std::mutex mutex_;
  std::map<PrimitiveKey, Bf16Matmul> cache_;
};

Bf16Matmuls& matmuls() {
  static Bf16Matmuls instance;
  return instance;
}

}  // namespace

bool onednn_has_bf16_kernels() {
  const int isa = static_cast<int>(dnnl_get_effective_cpu_isa());
  const int bf16 = static_cast<int>(dnnl_cpu_isa_avx512_core_bf16);  // AMX's mask contains it
  return (isa & bf16) == bf16;
}

Bf16Gemm bf16_gemm() { return g_bf16_gemm.get(); }

void set_bf16_gemm(Bf16Gemm backend) {
  HSPMD_CHECK(backend != Bf16Gemm::kOneDnn || onednn_has_bf16_kernels())
      << "bf16 GEMM on oneDNN: no bf16 kernels for this CPU (oneDNN's instruction set is " << onednn_isa() << ")";
  g_bf16_gemm.set(backend);
}

const char* bf16_gemm_name(Bf16Gemm backend) { return backend == Bf16Gemm::kOneDnn ? "onednn" : "float32"; }

void onednn_gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
                      int64_t lda, const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  Bf16Matmuls& all = matmuls();
  std::optional<ScopedNumThreads> serial;  // oneDNN reads the OpenMP thread count when it executes
  if (m * n * k < kMinParallelGemmMacs) {
    serial.emplace(1);
  } else {
    check_not_in_inactive_region("oneDNN bf16 matmul");
  }
  try {
    const Bf16Matmul mm = all.get({trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta});
    // oneDNN takes non-const handles; it only reads the sources.
    dnnl::memory src(mm.a, all.engine(), const_cast<BFloat16*>(a));
    dnnl::memory weights(mm.b, all.engine(), const_cast<BFloat16*>(b));
    dnnl::memory dst(mm.c, all.engine(), c);
    thread_local std::vector<uint8_t> scratch;
    if (scratch.size() < mm.scratchpad.get_size()) scratch.resize(mm.scratchpad.get_size());
    dnnl::memory scratchpad(mm.scratchpad, all.engine(), scratch.data());
    thread_local dnnl::stream stream(all.engine());
    mm.primitive.execute(stream, {{DNNL_ARG_SRC, src},
                                  {DNNL_ARG_WEIGHTS, weights},
                                  {DNNL_ARG_DST, dst},
                                  {DNNL_ARG_SCRATCHPAD, scratchpad}});
    stream.wait();
  } catch (const dnnl::error& e) {
    HSPMD_CHECK(false) << "oneDNN bf16 matmul failed (" << e.what() << ") for M " << m << " N " << n << " K " << k;
  }
}

}  // namespace hspmd::kernels
