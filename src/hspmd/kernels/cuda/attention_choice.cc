#include "hspmd/kernels/cuda/attention_choice.h"

#include <cstdlib>
#include <string_view>

#include "hspmd/core/error.h"

namespace hspmd::kernels::cuda {

const char* attention_kernel_name(CudaAttentionKernel kernel) {
  return kernel == CudaAttentionKernel::kFlash ? "flash" : "reference";
}

CudaAttentionKernel requested_attention_kernel(const char* environment_value) {
  if (environment_value == nullptr || *environment_value == '\0') return CudaAttentionKernel::kFlash;
  const std::string_view value(environment_value);
  if (value == "flash") return CudaAttentionKernel::kFlash;
  HSPMD_CHECK(value == "reference") << "HSPMD_CUDA_ATTENTION=" << value << ": expected flash or reference";
  return CudaAttentionKernel::kReference;
}

bool flash_attention_applies(DType dtype, int64_t head_dim, std::initializer_list<const void*> tensors) {
  if (dtype != DType::kBFloat16 || (head_dim != 64 && head_dim != 128)) return false;
  for (const void* tensor : tensors) {
    if (reinterpret_cast<std::uintptr_t>(tensor) % 16 != 0) return false;
  }
  return true;
}

CudaAttentionKernel choose_attention_kernel(CudaAttentionKernel requested, DType dtype, int64_t head_dim,
                                            std::initializer_list<const void*> tensors) {
  return requested == CudaAttentionKernel::kFlash && flash_attention_applies(dtype, head_dim, tensors)
             ? CudaAttentionKernel::kFlash
             : CudaAttentionKernel::kReference;
}

CudaAttentionKernel chosen_attention_kernel(DType dtype, int64_t head_dim, std::initializer_list<const void*> tensors) {
  return choose_attention_kernel(requested_attention_kernel(std::getenv("HSPMD_CUDA_ATTENTION")), dtype, head_dim,
                                 tensors);
}

int64_t flash_attention_tiles(int64_t tokens) { return (tokens + kFlashTileRows - 1) / kFlashTileRows; }

namespace {

constexpr int64_t kStatsBytes = 3 * kFlashTileRows * 4;  // lse, delta (float) and first key (int32) per row
static_assert(kStatsBytes % 128 == 0);

int64_t bf16_tile_bytes(int64_t head_dim) { return kFlashTileRows * (head_dim + 8) * 2; }
constexpr int64_t kScoreTileBytes = kFlashTileRows * (kFlashTileRows + 4) * 4;
constexpr int64_t kProbabilityTileBytes = kFlashTileRows * (kFlashTileRows + 8) * 2;

}  // namespace

// q, k, v tiles; scores; probabilities; the output accumulator.
int64_t flash_attention_fwd_smem_bytes(int64_t head_dim) {
  return 3 * bf16_tile_bytes(head_dim) + kScoreTileBytes + kProbabilityTileBytes + kFlashTileRows * (head_dim + 4) * 4;
}

// k, v, q, dout tiles; scores and dp; P^T and dS^T in bf16; row statistics.
int64_t flash_attention_bwd_dkdv_smem_bytes(int64_t head_dim) {
  return 4 * bf16_tile_bytes(head_dim) + 2 * kScoreTileBytes + 2 * kProbabilityTileBytes + kStatsBytes;
}

// q, dout, k, v tiles; scores and dp; dS in bf16; row statistics.
int64_t flash_attention_bwd_dq_smem_bytes(int64_t head_dim) {
  return 4 * bf16_tile_bytes(head_dim) + 2 * kScoreTileBytes + kProbabilityTileBytes + kStatsBytes;
}

}  // namespace hspmd::kernels::cuda
