// Which CUDA attention kernel runs (host logic, no CUDA header): the flash kernel
// (flash_attention.h) for bfloat16 storage, head dims 64 and 128 and 16-byte aligned tensors (it
// reads rows in 16-byte vectors); the reference kernel (attention.h) otherwise. The environment
// variable HSPMD_CUDA_ATTENTION, read at every call, forces the reference ("reference") or keeps
// the default ("flash", unset or empty); any other value is an error naming it. Also the flash
// kernel's plan: its tiles and the shared memory each of its kernels asks for.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "hspmd/core/dtype.h"

namespace hspmd::kernels::cuda {

enum class CudaAttentionKernel { kReference, kFlash };

const char* attention_kernel_name(CudaAttentionKernel kernel);

// HSPMD_CUDA_ATTENTION's value (null: unset) as the kernel asked for.
CudaAttentionKernel requested_attention_kernel(const char* environment_value);

// Whether the flash kernel takes these operands (every pointer 16-byte aligned).
bool flash_attention_applies(DType dtype, int64_t head_dim, std::initializer_list<const void*> tensors);

// The kernel attention_fwd / attention_bwd run: the requested one where it applies.
CudaAttentionKernel choose_attention_kernel(CudaAttentionKernel requested, DType dtype, int64_t head_dim,
                                            std::initializer_list<const void*> tensors);
// The same, with the request read from HSPMD_CUDA_ATTENTION.
CudaAttentionKernel chosen_attention_kernel(DType dtype, int64_t head_dim, std::initializer_list<const void*> tensors);

// The flash kernel's tiles: 64 query rows by 64 key rows, four warps of 16 rows each.
inline constexpr int64_t kFlashTileRows = 64;
inline constexpr int64_t kFlashWarps = 4;

// Tiles of kFlashTileRows covering `tokens` (the grid's x dimension of every flash kernel).
int64_t flash_attention_tiles(int64_t tokens);

// Dynamic shared memory of each flash kernel at a head dim: bf16 tiles of 64 rows with a pitch of
// head_dim + 8 (16-byte padding against bank conflicts), float score tiles of 64 x 68, bf16
// probability tiles of 64 x 72, float output accumulator 64 x (head_dim + 4), 64-entry row
// statistics. Every part is a multiple of 128 bytes (the fragments' loads need 32-byte alignment).
int64_t flash_attention_fwd_smem_bytes(int64_t head_dim);
int64_t flash_attention_bwd_dkdv_smem_bytes(int64_t head_dim);
int64_t flash_attention_bwd_dq_smem_bytes(int64_t head_dim);

// Shared memory a block may opt into on Hopper (cudaFuncAttributeMaxDynamicSharedMemorySize).
inline constexpr int64_t kHopperMaxBlockSmemBytes = 227 * 1024;

}  // namespace hspmd::kernels::cuda
