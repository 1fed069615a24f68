// cuBLASLt GEMM against the CPU matmul (kernels/matmul.h): every transposition, odd sizes, a batch
// sharing one weight, accumulation (beta), TF32 when asked, and bf16 operands with float32
// accumulation into float32 or bfloat16.
#include "hspmd/kernels/cuda/gemm.h"

#include <gtest/gtest.h>

#include <string>

#include "gpu/gpu_testlib.h"
#include "hspmd/kernels/matmul.h"

namespace hspmd::kernels::cuda {
namespace {

using hspmd::testing::all_close;
using hspmd::testing::kBFloat16Atol;
using hspmd::testing::kBFloat16Rtol;
using hspmd::testing::random_tensor;
using hspmd::testing::to_bf16;
using hspmd::testing::to_f32;

class CudaGemm : public hspmd::testing::GpuTest {
 protected:
  CudaGemm() : gemm_(0) {}

  // a and b as stored (row-major, transposed per the flags), batch products; out compared with
  // kernels::matmul on the float32 values of the operands.
  void check(int64_t batch, int64_t m, int64_t n, int64_t k, bool ta, bool tb, bool shared_b, DType operands,
             DType out_dtype, bool tf32, float beta, double rtol, double atol) {
    const std::string what = "batch " + std::to_string(batch) + " m " + std::to_string(m) + " n " +
                             std::to_string(n) + " k " + std::to_string(k) + (ta ? " a^T" : "") + (tb ? " b^T" : "") +
                             (shared_b ? " shared b" : "") + " " + std::string(dtype_name(operands)) + " -> " +
                             std::string(dtype_name(out_dtype)) + (tf32 ? " tf32" : "") +
                             " beta " + std::to_string(beta);
    SCOPED_TRACE(what);
    const Shape a_shape = ta ? Shape{batch, k, m} : Shape{batch, m, k};
    const Shape b_shape = shared_b ? (tb ? Shape{n, k} : Shape{k, n}) : (tb ? Shape{batch, n, k} : Shape{batch, k, n});
    Tensor a = random_tensor(a_shape, DType::kFloat32, 1);
    Tensor b = random_tensor(b_shape, DType::kFloat32, 2);
    Tensor out0 = random_tensor({batch, m, n}, DType::kFloat32, 3);
    if (operands == DType::kBFloat16) {  // the CPU sees the bf16 values
      a = to_f32(to_bf16(a));
      b = to_f32(to_bf16(b));
    }
    if (out_dtype == DType::kBFloat16) out0 = to_f32(to_bf16(out0));
    Tensor expected = out0.clone();
    matmul(a, b, expected, {.trans_a = ta, .trans_b = tb, .alpha = 1.0, .beta = beta, .bf16_operands = false});

    auto device_a = upload(operands == DType::kBFloat16 ? to_bf16(a) : a);
    auto device_b = upload(operands == DType::kBFloat16 ? to_bf16(b) : b);
    auto device_out = upload(out_dtype == DType::kBFloat16 ? to_bf16(out0) : out0);
    gemm_.run({.a = device_a.data(),
               .b = device_b.data(),
               .out = device_out.data(),
               .operands = operands,
               .out_dtype = out_dtype,
               .m = m,
               .n = n,
               .k = k,
               .trans_a = ta,
               .trans_b = tb,
               .alpha = 1.0f,
               .beta = beta,
               .allow_tf32 = tf32,
               .batch = batch,
               .a_batch_stride = m * k,
               .b_batch_stride = shared_b ? 0 : k * n,
               .out_batch_stride = m * n},
              stream_.get());
    Tensor actual = to_f32(download(device_out, {batch, m, n}, out_dtype));
    EXPECT_TRUE(all_close(actual, expected, rtol, atol, what));
  }

  CublasLtGemm gemm_;
};

TEST_F(CudaGemm, Float32EveryTranspositionOddSizes) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) check(1, 37, 53, 29, ta, tb, false, DType::kFloat32, DType::kFloat32, false, 0, 1e-5, 1e-5);
  }
}

TEST_F(CudaGemm, Float32BatchedWithASharedWeightAndAccumulation) {
  check(3, 17, 31, 45, false, true, true, DType::kFloat32, DType::kFloat32, false, 1.0f, 1e-5, 1e-5);
  check(2, 9, 11, 130, true, false, false, DType::kFloat32, DType::kFloat32, false, 0.5f, 1e-5, 1e-5);
}

TEST_F(CudaGemm, Tf32OnlyWhenAsked) {
  // TF32 keeps 10 bits of each operand's significand: products off by up to ~2^-11 relative.
  check(1, 64, 96, 200, false, true, false, DType::kFloat32, DType::kFloat32, true, 0, 1e-2, 2e-2);
}

TEST_F(CudaGemm, BFloat16OperandsAccumulateInFloat32) {
  // The products of bf16 values are exact in float32: only the order of additions differs.
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      check(1, 33, 65, 257, ta, tb, false, DType::kBFloat16, DType::kFloat32, false, 0, 1e-5, 1e-4);
    }
  }
  check(4, 19, 23, 41, false, true, true, DType::kBFloat16, DType::kFloat32, false, 1.0f, 1e-5, 1e-4);
}

TEST_F(CudaGemm, BFloat16Out) {
  check(2, 31, 47, 129, false, true, false, DType::kBFloat16, DType::kBFloat16, false, 0, kBFloat16Rtol, kBFloat16Atol);
}

TEST_F(CudaGemm, RefusesOperandsItDoesNotTake) {
  GemmArgs args;
  args.m = args.n = args.k = 1;
  args.operands = args.out_dtype = DType::kFloat64;
  EXPECT_THROW(gemm_.run(args, stream_.get()), Error);
  args.operands = DType::kFloat32;
  args.out_dtype = DType::kBFloat16;  // bf16 out needs bf16 operands
  EXPECT_THROW(gemm_.run(args, stream_.get()), Error);
}

}  // namespace
}  // namespace hspmd::kernels::cuda
