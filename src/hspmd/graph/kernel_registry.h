// Kernels by (op kind, device type, dtype): where a backend plugs its kernels in. The CPU backend
// registers one per op family file (graph/ops/*.cc, next to the op's shape rule); a CUDA backend
// adds its own entries for DeviceType::kCUDA, and nothing above the registry names a device.
//
//   KernelRegistry kernels = build_cpu_kernels();
//   kernels.add(OpKind::kAdd, DeviceType::kCPU, {DType::kFloat32}, my_add);   // a test's own
//   const Kernel& k = kernels.get(op, DeviceType::kCPU);
//     -> the kernel for op.kind and the dtype of op's output 0 (the dtype the op computes in:
//        a loss over float32 logits is float32, an embedding of a bf16 table is bf16); Error
//        "no cpu kernel for op kind attention with dtype bfloat16 (op 'layers.0.attn')" when none
//
// Kernels are run through run_kernel (graph/run_kernel.h), which checks what they produce.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "hspmd/core/allocator.h"
#include "hspmd/core/device.h"
#include "hspmd/core/tensor.h"
#include "hspmd/graph/graph.h"

namespace hspmd::graph {

struct KernelContext {
  const Op& op;
  const std::vector<Tensor>& inputs;
  const std::vector<Shape>& output_shapes;  // resolved from the run's symbol binding
  Allocator* allocator;
  std::vector<Tensor> outputs;              // filled by the kernel, one per op output
  // Set by the distributed runtime when this rank holds one shard of the op's vocabulary (a
  // vocab-parallel cross-entropy): returns `mine` from every shard of the vocabulary stacked as
  // [k, mine...], this rank's included. Null when the rank holds whole rows.
  std::function<Tensor(const Tensor& mine)> gather_vocab_shards;

  // A fresh uninitialized tensor for output i (resolved shape, declared dtype).
  Tensor new_output(int i) const;
};

// Computes ctx.outputs from ctx.inputs (shapes and dtypes as the op's shape rule declared them).
using Kernel = std::function<void(KernelContext&)>;

class KernelRegistry {
 public:
  // One kernel for each of `dtypes`; an entry that already exists is an internal error.
  void add(OpKind kind, DeviceType device, const std::vector<DType>& dtypes, const Kernel& kernel);
  // Null when no kernel is registered for the combination.
  const Kernel* find(OpKind kind, DeviceType device, DType dtype) const;
  // The kernel for `op` on `device` (dtype of its output 0); Error naming the op otherwise.
  const Kernel& get(const Op& op, DeviceType device) const;

  // The CPU kernels of every op kind (build_cpu_kernels), built on first use.
  static const KernelRegistry& standard();

  static constexpr int kDeviceTypes = 2;  // DeviceType::kCPU, kCUDA
  static constexpr int kDTypes = 5;       // DType::kFloat32 .. kInt64

 private:
  static size_t slot(OpKind kind, DeviceType device, DType dtype);
  std::vector<Kernel> kernels_ = std::vector<Kernel>(static_cast<size_t>(kNumOpKinds) * kDeviceTypes * kDTypes);
};

// The CPU backend: every op family's kernels (graph/ops/*.cc, listed in ops/op_defs.h). Every
// kind but the leaves the executors bind (placeholder, parameter) has at least one.
KernelRegistry build_cpu_kernels();

}  // namespace hspmd::graph
