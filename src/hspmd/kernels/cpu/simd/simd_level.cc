// simd_level (kernels/simd.h) and the dispatch of the row loops (cpu/simd/row_ops.h).
#include <cstdlib>
#include <string>

#include "hspmd/core/error.h"
#include "hspmd/kernels/cpu/environment_choice.h"
#include "hspmd/kernels/cpu/simd/row_ops.h"
#include "hspmd/kernels/simd.h"

namespace hspmd::kernels {
namespace {

SimdLevel level_from_environment() {
  const char* forced = std::getenv("HSPMD_SIMD");
  if (forced == nullptr || *forced == '\0') return best_simd_level();
  const SimdLevel level = parse_simd_level(forced);
  HSPMD_CHECK(simd_level_supported(level))
      << "HSPMD_SIMD=" << forced << ": this CPU does not support " << simd_level_name(level) << " (best: "
      << simd_level_name(best_simd_level()) << ")";
  return level;
}

cpu::EnvironmentChoice<SimdLevel> g_level{level_from_environment};  // HSPMD_SIMD

}  // namespace

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar:
      return "scalar";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvx512:
      return "avx512";
  }
  return "unknown";
}

SimdLevel parse_simd_level(std::string_view name) {
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (name == simd_level_name(level)) return level;
  }
  HSPMD_CHECK(false) << "unknown SIMD level '" << std::string(name) << "' (expected scalar, avx2 or avx512)";
  return SimdLevel::kScalar;
}

bool simd_level_supported(SimdLevel level) {
  // __builtin_cpu_supports also requires the OS to save the registers (XCR0).
  __builtin_cpu_init();
  switch (level) {
    case SimdLevel::kScalar:
      return true;
    case SimdLevel::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case SimdLevel::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("fma");
  }
  return false;
}

SimdLevel best_simd_level() {
  if (simd_level_supported(SimdLevel::kAvx512)) return SimdLevel::kAvx512;
  if (simd_level_supported(SimdLevel::kAvx2)) return SimdLevel::kAvx2;
  return SimdLevel::kScalar;
}

SimdLevel simd_level() { return g_level.get(); }

void set_simd_level(SimdLevel level) {
  HSPMD_CHECK(simd_level_supported(level))
      << "set_simd_level: this CPU does not support " << simd_level_name(level) << " (best: "
      << simd_level_name(best_simd_level()) << ")";
  g_level.set(level);
}

namespace cpu {

const RowOps& row_ops() {
  switch (simd_level()) {
    case SimdLevel::kAvx512:
      return kRowOpsAvx512;
    case SimdLevel::kAvx2:
      return kRowOpsAvx2;
    case SimdLevel::kScalar:
      break;
  }
  return kRowOpsScalar;
}

}  // namespace cpu
}  // namespace hspmd::kernels
