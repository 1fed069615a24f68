// Runs on every build with the CUDA backend, GPU or not: the CUDA kernel registry covers what the
// CPU one runs, so a kernel missing for a decoder graph fails here, not in a GPU run.
//  - every op of the decoder graphs (each family, float32 and bf16 mixed precision, the fused and
//    the separate lm-head loss, forward and backward) has a CUDA entry for its dtype;
//  - every (kind, dtype) the CPU registry has is in the CUDA registry or on cpu_only_kernels(),
//    and nothing on that list has a CUDA entry (the list says exactly what is missing).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>

#include "gpu/decoder_configs_testlib.h"
#include "hspmd/graph/cuda/cuda_kernels.h"

namespace hspmd::graph {
namespace {

constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt32, DType::kInt64};

bool is_bound_leaf(OpKind kind) { return kind == OpKind::kPlaceholder || kind == OpKind::kParameter; }

std::string entry(OpKind kind, DType dtype) {
  return std::string(op_kind_name(kind)) + " / " + std::string(dtype_name(dtype));
}

TEST(CudaKernelCoverage, EveryOpOfTheDecoderGraphsHasACudaKernel) {
  const KernelRegistry& cuda = cuda_kernels();
  for (const testing::DecoderConfig& config : testing::decoder_configs()) {
    const auto model = testing::decoder_model(config);
    for (DType precision : {DType::kFloat32, DType::kBFloat16}) {
      for (bool fused : {true, false}) {
        const models::ModelGraph m = model->build({.precision = precision, .fused_head_loss = fused});
        std::set<std::pair<OpKind, DType>> seen;
        for (int id = 0; id < m.graph.num_ops(); ++id) {
          const Op& op = m.graph.op(id);
          if (is_bound_leaf(op.kind)) continue;
          seen.insert({op.kind, op.outputs[0].dtype});
        }
        EXPECT_GT(seen.size(), 10u) << config.name;
        for (const auto& [kind, dtype] : seen) {
          EXPECT_NE(cuda.find(kind, DeviceType::kCUDA, dtype), nullptr)
              << config.name << " (" << dtype_name(precision) << ", fused head " << fused << ") runs "
              << entry(kind, dtype) << ", which has no CUDA kernel";
        }
      }
    }
  }
}

TEST(CudaKernelCoverage, EveryCpuKernelIsOnTheGpuOrListedAsCpuOnly) {
  const KernelRegistry& cpu = KernelRegistry::standard();
  const KernelRegistry& cuda = cuda_kernels();
  std::set<std::pair<OpKind, DType>> listed;
  for (const CpuOnlyKernel& k : cpu_only_kernels()) {
    EXPECT_TRUE(listed.insert({k.kind, k.dtype}).second) << entry(k.kind, k.dtype) << " is listed twice";
    EXPECT_FALSE(k.reason.empty()) << entry(k.kind, k.dtype);
    EXPECT_NE(cpu.find(k.kind, DeviceType::kCPU, k.dtype), nullptr)
        << entry(k.kind, k.dtype) << " is listed as CPU-only but the CPU has no such kernel";
    EXPECT_EQ(cuda.find(k.kind, DeviceType::kCUDA, k.dtype), nullptr)
        << entry(k.kind, k.dtype) << " is listed as CPU-only but has a CUDA kernel: take it off the list";
  }
  int covered = 0;
  for (int kind = 0; kind < kNumOpKinds; ++kind) {
    for (DType dtype : kDTypes) {
      const auto k = static_cast<OpKind>(kind);
      if (cpu.find(k, DeviceType::kCPU, dtype) == nullptr) continue;
      const bool on_gpu = cuda.find(k, DeviceType::kCUDA, dtype) != nullptr;
      covered += on_gpu;
      EXPECT_TRUE(on_gpu || listed.count({k, dtype}))
          << entry(k, dtype) << " runs on the CPU but has no CUDA kernel and is not in cpu_only_kernels()";
    }
  }
  EXPECT_GT(covered, 30);
}

TEST(CudaKernelCoverage, BuildingTheRegistryTouchesNoGpu) {
  // This machine may have no GPU: building (and looking up) must not reach the CUDA runtime.
  const KernelRegistry registry = build_cuda_kernels();
  EXPECT_NE(registry.find(OpKind::kMatmul, DeviceType::kCUDA, DType::kBFloat16), nullptr);
  EXPECT_EQ(registry.find(OpKind::kMatmul, DeviceType::kCPU, DType::kFloat32), nullptr);
}

}  // namespace
}  // namespace hspmd::graph
