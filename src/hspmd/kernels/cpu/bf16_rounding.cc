// round_to_bfloat16 (kernels/bf16_rounding.h) on the row loops of the SIMD level in use
// (cpu/simd/row_ops.h), in blocks spread over the kernels' threads.
#include "hspmd/kernels/bf16_rounding.h"

#include <algorithm>

#include "hspmd/core/error.h"
#include "hspmd/kernels/cpu/simd/row_ops.h"

namespace hspmd::kernels {

namespace {

// One memory-bound pass per operand of every matmul; below 128K elements (~0.1 ms) it runs on the
// calling thread, where a fork/join would cost more than it saves. Not much higher: that leaves a
// small model's operands to one core (docs/cpu-kernels.md, "Small loops run on one thread").
constexpr int64_t kParallelElements = int64_t{1} << 17;
constexpr int64_t kBlock = int64_t{1} << 14;  // elements of one row-loop call: a multiple of every level's lanes

// f(first, count) over [0, n) in blocks.
template <typename F>
void for_blocks(int64_t n, F&& f) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t b = 0; b < blocks; ++b) f(b * kBlock, std::min(kBlock, n - b * kBlock));
}

}  // namespace

void round_to_bfloat16(const float* src, float* dst, int64_t n) {
  const cpu::RowOps& ops = cpu::row_ops();
  for_blocks(n, [&](int64_t i, int64_t count) { ops.round_to_bfloat16(src + i, dst + i, count); });
}

void to_bfloat16(const float* src, BFloat16* dst, int64_t n) {
  static_assert(sizeof(BFloat16) == sizeof(uint16_t));
  const cpu::RowOps& ops = cpu::row_ops();
  uint16_t* bits = reinterpret_cast<uint16_t*>(dst);
  for_blocks(n, [&](int64_t i, int64_t count) { ops.to_bfloat16(src + i, bits + i, count); });
}

void round_to_bfloat16(const Tensor& x, const Tensor& out) {
  HSPMD_CHECK(x.defined() && out.defined()) << "round_to_bfloat16: undefined tensor among x, out";
  HSPMD_CHECK(x.dtype() == DType::kFloat32 && out.dtype() == DType::kFloat32 && x.shape() == out.shape())
      << "round_to_bfloat16: x " << x.to_string() << " and out " << out.to_string()
      << " must be float32 of one shape";
  round_to_bfloat16(x.data<float>(), out.data<float>(), x.numel());
}

}  // namespace hspmd::kernels
