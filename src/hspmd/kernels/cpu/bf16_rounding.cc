// round_to_bfloat16 (kernels/bf16_rounding.h). Written without branches so the compiler vectorizes
// it for the baseline instruction set: a NaN is recognised by comparison and kept as a quiet NaN,
// every other value takes the round-to-nearest-even carry of core/bfloat16.h.
#include "hspmd/kernels/bf16_rounding.h"

#include <bit>
#include <cstring>

#include "hspmd/core/error.h"

namespace hspmd::kernels {

namespace {

// The bits of the nearest bfloat16 in the upper half of a float32's bits.
inline uint32_t rounded_bits(const float* x) {
  uint32_t u;
  std::memcpy(&u, x, sizeof u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  const uint32_t quiet_nan = (u | 0x00400000u) & 0xffff0000u;
  const bool is_nan = (u & 0x7fffffffu) > 0x7f800000u;
  return is_nan ? quiet_nan : rounded;
}

// One memory-bound pass per operand of every matmul; below 128K elements (~0.1 ms) it runs on the
// calling thread. A threshold of 4M (from when matmul's GEMMs started a thread each: fork/joins
// looked dear) left llama-tiny's operands to one thread: its bf16 step took 105-114 ms, against
// 78-94 ms with 128K (median of 11 steps, 4 interleaved rounds, 2 threads, load 2).
constexpr int64_t kParallelElements = int64_t{1} << 17;

}  // namespace

void round_to_bfloat16(const float* src, float* dst, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t r = rounded_bits(src + i);
    std::memcpy(dst + i, &r, sizeof r);
  }
}

void to_bfloat16(const float* src, BFloat16* dst, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i) dst[i].bits = static_cast<uint16_t>(rounded_bits(src + i) >> 16);
}

void round_to_bfloat16(const Tensor& x, const Tensor& out) {
  HSPMD_CHECK(x.defined() && out.defined()) << "round_to_bfloat16: undefined tensor among x, out";
  HSPMD_CHECK(x.dtype() == DType::kFloat32 && out.dtype() == DType::kFloat32 && x.shape() == out.shape())
      << "round_to_bfloat16: x " << x.to_string() << " and out " << out.to_string()
      << " must be float32 of one shape";
  round_to_bfloat16(x.data<float>(), out.data<float>(), x.numel());
}

}  // namespace hspmd::kernels
