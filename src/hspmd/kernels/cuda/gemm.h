// Matrix multiplication on cuBLASLt, with the conventions of kernels/matmul.h (row-major):
//
//   out[b, M, N] = alpha * op(a)[b, M, K] @ op(b)[b, K, N] + beta * out[b, M, N]
//
// op(x) is x or its transpose per trans_a / trans_b; a is [M, K] (or [K, M] transposed), b is
// [K, N] (or [N, K]). A linear layer y[T, F] = x[T, H] @ W^T with W[F, H] is
// {.m = T, .n = F, .k = H, .trans_b = true} with b = W shared by every batch (b_batch_stride 0).
//
// Operand types (GemmDTypes):
//   bf16 operands, fp32 accumulation, bf16 or fp32 out  -- bf16 mixed precision's GEMMs
//   fp32 operands and out, fp32 arithmetic              -- TF32 tensor cores only with allow_tf32
//
// cuBLASLt is column-major: a row-major [R, C] matrix is its column-major transpose, so the call
// computes out^T = op(b)^T @ op(a)^T, with b as cuBLASLt's A and a as its B.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "hspmd/core/dtype.h"

namespace hspmd::kernels::cuda {

struct GemmArgs {
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;
  DType operands = DType::kFloat32;  // a and b: kFloat32 or kBFloat16
  DType out_dtype = DType::kFloat32;  // kFloat32, or kBFloat16 with bf16 operands
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;  // 1 accumulates into out
  // fp32 operands only: TF32 tensor cores (10-bit significands in the products).
  bool allow_tf32 = false;
  // Batched: `batch` products, each operand `*_batch_stride` elements after the previous one
  // (0 shares one matrix, e.g. a layer's weight). Defaults: one product.
  int64_t batch = 1;
  int64_t a_batch_stride = 0;
  int64_t b_batch_stride = 0;
  int64_t out_batch_stride = 0;
};

// A cuBLASLt handle and its workspace on one device. One per rank (stream-ordered: calls on one
// stream may share it; concurrent streams each need their own).
class CublasLtGemm {
 public:
  explicit CublasLtGemm(int device, size_t workspace_bytes = size_t{32} << 20);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Queues the product on `stream`. Throws Error for unsupported operand types, bad shapes, or
  // when cuBLASLt has no algorithm for them.
  void run(const GemmArgs& args, cudaStream_t stream);

 private:
  int device_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_;
};

}  // namespace hspmd::kernels::cuda
