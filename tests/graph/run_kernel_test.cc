// Kernels by (op kind, device type, dtype) and run_kernel: lookups, the error for a combination
// nothing registered, outputs checked against the shape rule (a test-local registry with
// deliberately wrong kernels), and kernel errors that name the op and keep the original as cause.
#include "hspmd/graph/run_kernel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <exception>
#include <stdexcept>

#include "error_of.h"
#include "hspmd/graph/executor.h"
#include "hspmd/graph/init.h"
#include "hspmd/graph/ops.h"

namespace hspmd::graph {
namespace {

using ::testing::HasSubstr;

// sum = a + b over float32 [2] placeholders, run directly through run_kernel.
struct AddFixture {
  Graph g;
  TensorRef sum;
  std::vector<Tensor> inputs{Tensor::from_vector<float>(Shape{2}, {1, 2}), Tensor::from_vector<float>(Shape{2}, {3, 4})};
  std::vector<Shape> shapes{Shape{2}};
  AddFixture() {
    TensorRef a = g.placeholder("a", {2}, DType::kFloat32), b = g.placeholder("b", {2}, DType::kFloat32);
    sum = ops::add(g, a, b, "sum");
  }
  const Op& op() const { return g.op(sum.op); }
  KernelContext context() { return KernelContext{op(), inputs, shapes, &Allocator::process_default(), {}, {}}; }
};

TEST(KernelRegistry, FindsTheCpuKernelOfEachSupportedDtype) {
  const KernelRegistry& k = KernelRegistry::standard();
  EXPECT_NE(k.find(OpKind::kMatmul, DeviceType::kCPU, DType::kFloat32), nullptr);
  EXPECT_NE(k.find(OpKind::kMatmul, DeviceType::kCPU, DType::kBFloat16), nullptr);
  EXPECT_NE(k.find(OpKind::kReshape, DeviceType::kCPU, DType::kInt64), nullptr);
  EXPECT_EQ(k.find(OpKind::kAttention, DeviceType::kCPU, DType::kBFloat16), nullptr);  // float32/float64 only
  EXPECT_EQ(k.find(OpKind::kMatmul, DeviceType::kCUDA, DType::kFloat32), nullptr);     // no CUDA backend yet
  EXPECT_EQ(k.find(OpKind::kParameter, DeviceType::kCPU, DType::kFloat32), nullptr);   // bound, never run
}

TEST(KernelRegistry, AnUnsupportedCombinationNamesDeviceKindDtypeAndOp) {
  AddFixture f;
  EXPECT_EQ(testing::error_of([&] { KernelRegistry::standard().get(f.op(), DeviceType::kCUDA); }),
            "no cuda kernel for op kind add with dtype float32 (op 'sum')");
  KernelRegistry empty;
  KernelContext ctx = f.context();
  EXPECT_EQ(testing::error_of([&] { run_kernel(ctx, {.kernels = &empty}); }),
            "no cpu kernel for op kind add with dtype float32 (op 'sum')");
}

TEST(KernelRegistry, ASecondKernelForOneCombinationIsRefused) {
  KernelRegistry r;
  const Kernel noop = [](KernelContext&) {};
  r.add(OpKind::kAdd, DeviceType::kCPU, {DType::kFloat32}, noop);
  r.add(OpKind::kAdd, DeviceType::kCUDA, {DType::kFloat32}, noop);  // another device: another entry
  EXPECT_THAT(testing::error_of([&] { r.add(OpKind::kAdd, DeviceType::kCPU, {DType::kFloat64, DType::kFloat32}, noop); }),
              HasSubstr("a second cpu kernel for op kind add with dtype float32"));
}

TEST(RunKernel, RunsTheRegisteredKernelAndChecksItsOutputs) {
  AddFixture f;
  KernelContext ctx = f.context();
  run_kernel(ctx);
  ASSERT_EQ(ctx.outputs.size(), 1u);
  EXPECT_EQ(ctx.outputs[0].to_vector<float>(), (std::vector<float>{4, 6}));

  KernelRegistry wrong;
  wrong.add(OpKind::kAdd, DeviceType::kCPU, {DType::kFloat32},
            [](KernelContext& k) { k.outputs = {Tensor::zeros(Shape{3}, DType::kFloat32)}; });
  KernelContext shape = f.context();
  EXPECT_THAT(testing::error_of([&] { run_kernel(shape, {.kernels = &wrong, .rank = 1}); }),
              HasSubstr("rank 1, op 'sum' (add): output 0 is float32[3], expected float32[2]"));

  KernelRegistry wrong_dtype;
  wrong_dtype.add(OpKind::kAdd, DeviceType::kCPU, {DType::kFloat32},
                  [](KernelContext& k) { k.outputs = {Tensor::zeros(Shape{2}, DType::kFloat64)}; });
  KernelContext dtype = f.context();
  EXPECT_THAT(testing::error_of([&] { run_kernel(dtype, {.kernels = &wrong_dtype}); }),
              HasSubstr("op 'sum' (add): output 0 is float64[2], expected float32[2]"));

  KernelRegistry missing;
  missing.add(OpKind::kAdd, DeviceType::kCPU, {DType::kFloat32}, [](KernelContext&) {});
  KernelContext none = f.context();
  EXPECT_THAT(testing::error_of([&] { run_kernel(none, {.kernels = &missing}); }),
              HasSubstr("op 'sum' (add): the kernel produced 0 outputs, the op declares 1"));
}

// The single-device executor takes its kernels from the registry it is given, checks included.
TEST(RunKernel, TheExecutorRunsThroughIt) {
  AddFixture f;
  KernelRegistry wrong;
  wrong.add(OpKind::kAdd, DeviceType::kCPU, {DType::kFloat32},
            [](KernelContext& k) { k.outputs = {Tensor::zeros(Shape{2, 1}, DType::kFloat32)}; });
  Executor ex(f.g, {f.sum}, {.kernels = &wrong});
  const TensorMap feeds{{"a", f.inputs[0]}, {"b", f.inputs[1]}};
  EXPECT_THAT(testing::error_of([&] { ex.run(feeds, {}); }),
              HasSubstr("op 'sum' (add): output 0 is float32[2, 1], expected float32[2]"));
}

// A kernel's error comes out naming the op, of the same type for OutOfMemoryError, with the
// original nested inside and its origin (the source place --verbose prints) kept.
TEST(RunKernel, KernelErrorsNameTheOpAndKeepTheOriginalAsCause) {
  AddFixture f;
  KernelRegistry failing;
  failing.add(OpKind::kAdd, DeviceType::kCPU, {DType::kFloat32}, [](KernelContext& k) {
    HSPMD_CHECK(k.inputs[0].numel() > 2) << "add: a has " << k.inputs[0].numel() << " elements";
  });
  KernelContext ctx = f.context();
  try {
    run_kernel(ctx, {.kernels = &failing, .rank = 3});
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "rank 3, op 'sum' (add): add: a has 2 elements");
    EXPECT_THAT(e.origin(), HasSubstr("run_kernel_test.cc"));
    EXPECT_THAT(e.origin(), HasSubstr("check failed (k.inputs[0].numel() > 2)"));
    try {
      std::rethrow_if_nested(e);
      FAIL() << "no cause";
    } catch (const Error& cause) {
      EXPECT_STREQ(cause.what(), "add: a has 2 elements");
      EXPECT_EQ(cause.origin(), e.origin());
    }
  }

  KernelRegistry oom;
  oom.add(OpKind::kAdd, DeviceType::kCPU, {DType::kFloat32},
          [](KernelContext&) { throw OutOfMemoryError("allocating 64 bytes exceeds the capacity"); });
  KernelContext ctx2 = f.context();
  EXPECT_THROW(
      {
        try {
          run_kernel(ctx2, {.kernels = &oom});
        } catch (const OutOfMemoryError& e) {
          EXPECT_STREQ(e.what(), "op 'sum' (add): allocating 64 bytes exceeds the capacity");
          throw;
        }
      },
      OutOfMemoryError);

  KernelRegistry foreign;  // not an hspmd Error: wrapped all the same, the original nested
  foreign.add(OpKind::kAdd, DeviceType::kCPU, {DType::kFloat32},
              [](KernelContext&) { throw std::out_of_range("vector::at"); });
  KernelContext ctx3 = f.context();
  try {
    run_kernel(ctx3, {.kernels = &foreign});
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "op 'sum' (add): vector::at");
    EXPECT_THROW(std::rethrow_if_nested(e), std::out_of_range);
  }
}

// A real kernel's check, through the standard registry: the cause is the kernel's own error,
// raised in the CPU backend's source.
TEST(RunKernel, TheCauseOfAStandardKernelErrorIsRaisedInTheKernel) {
  Graph g;
  TensorRef table = g.parameter("table", Shape{4, 2}, DType::kFloat32, InitSpec::normal(1.0));
  TensorRef ids = g.placeholder("ids", {2}, DType::kInt64);
  TensorRef y = ops::embedding(g, table, ids, "lookup");
  const std::vector<Tensor> inputs{Tensor::zeros(Shape{4, 2}, DType::kFloat32),
                                   Tensor::from_vector<int64_t>(Shape{2}, {1, 9})};  // 9 >= 4 rows
  const std::vector<Shape> shapes{Shape{2, 2}};
  KernelContext ctx{g.op(y.op), inputs, shapes, &Allocator::process_default(), {}, {}};
  try {
    run_kernel(ctx);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("op 'lookup' (embedding): "));
    EXPECT_THAT(e.origin(), HasSubstr("kernels/cpu/embedding.cc"));
    try {
      std::rethrow_if_nested(e);
      FAIL() << "no cause";
    } catch (const Error& cause) {
      EXPECT_EQ(std::string(e.what()), "op 'lookup' (embedding): " + std::string(cause.what()));
    }
  }
}

}  // namespace
}  // namespace hspmd::graph
