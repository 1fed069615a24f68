// SIMD level of the CPU kernels' inner loops, chosen at run time: one binary runs on any x86-64 and
// uses AVX2 or AVX-512 where the CPU (and the OS) support them.
//
//   HSPMD_SIMD=scalar|avx2|avx512   forces a level for the process (an error if the CPU lacks it)
//   kernels::set_simd_level(kernels::SimdLevel::kScalar);   // the same from code (tests, benches)
//
// Each level is the same source compiled for one instruction set (kernels/cpu/simd/row_ops.inc);
// scalar is the one-lane build, the reference the others are tested against. Levels differ only in
// the order of additions inside a row, so results agree to rounding, not bitwise.
#pragma once

#include <string>
#include <string_view>

namespace hspmd::kernels {

enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

const char* simd_level_name(SimdLevel level);  // "scalar", "avx2", "avx512"
SimdLevel parse_simd_level(std::string_view name);  // throws Error for an unknown name

bool simd_level_supported(SimdLevel level);  // by this CPU and OS (and this build)
SimdLevel best_simd_level();                 // the widest supported level

// The level in use: HSPMD_SIMD when set (read once, at first use), else best_simd_level().
SimdLevel simd_level();
// Switches every kernel to `level` (throws Error when unsupported). Not meant to race with running
// kernels: call it between them.
void set_simd_level(SimdLevel level);

}  // namespace hspmd::kernels
