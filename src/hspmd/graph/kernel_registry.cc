#include "hspmd/graph/kernel_registry.h"

#include "hspmd/core/error.h"
#include "hspmd/graph/ops/op_defs.h"

namespace hspmd::graph {

// The table has a row for every device type and dtype: growing either enum must grow it.
static_assert(static_cast<int>(DeviceType::kCUDA) + 1 == KernelRegistry::kDeviceTypes);
static_assert(static_cast<int>(DType::kInt64) + 1 == KernelRegistry::kDTypes);

namespace {
const char* device_type_name(DeviceType device) {
  switch (device) {
    case DeviceType::kCPU: return "cpu";
    case DeviceType::kCUDA: return "cuda";
  }
  return "unknown";
}
}  // namespace

Tensor KernelContext::new_output(int i) const {
  return Tensor::empty(output_shapes.at(i), op.outputs.at(i).dtype, allocator);
}

size_t KernelRegistry::slot(OpKind kind, DeviceType device, DType dtype) {
  HSPMD_ASSERT(static_cast<int>(device) < kDeviceTypes && static_cast<int>(dtype) < kDTypes)
      << "device type " << static_cast<int>(device) << ", dtype " << static_cast<int>(dtype);
  return (static_cast<size_t>(kind) * kDeviceTypes + static_cast<size_t>(device)) * kDTypes +
         static_cast<size_t>(dtype);
}

void KernelRegistry::add(OpKind kind, DeviceType device, const std::vector<DType>& dtypes, const Kernel& kernel) {
  HSPMD_ASSERT(kernel) << "an empty kernel for op kind " << op_kind_name(kind);
  for (DType dtype : dtypes) {
    Kernel& entry = kernels_.at(slot(kind, device, dtype));
    HSPMD_ASSERT(!entry) << "a second " << device_type_name(device) << " kernel for op kind " << op_kind_name(kind)
                         << " with dtype " << dtype_name(dtype);
    entry = kernel;
  }
}

const Kernel* KernelRegistry::find(OpKind kind, DeviceType device, DType dtype) const {
  const Kernel& entry = kernels_.at(slot(kind, device, dtype));
  return entry ? &entry : nullptr;
}

const Kernel& KernelRegistry::get(const Op& op, DeviceType device) const {
  HSPMD_ASSERT(!op.outputs.empty()) << "op '" << op.name << "' has no outputs";
  const DType dtype = op.outputs[0].dtype;
  const Kernel* kernel = find(op.kind, device, dtype);
  HSPMD_CHECK(kernel != nullptr) << "no " << device_type_name(device) << " kernel for op kind "
                                 << op_kind_name(op.kind) << " with dtype " << dtype_name(dtype) << " (op '"
                                 << op.name << "')";
  return *kernel;
}

KernelRegistry build_cpu_kernels() {
  KernelRegistry r;
  detail::add_leaf_kernels(r);
  detail::add_embedding_kernels(r);
  detail::add_rms_norm_kernels(r);
  detail::add_matmul_kernels(r);
  detail::add_rope_kernels(r);
  detail::add_attention_kernels(r);
  detail::add_elementwise_kernels(r);
  detail::add_reshape_kernels(r);
  detail::add_cross_entropy_kernels(r);
  detail::add_lm_head_loss_kernels(r);
  detail::add_bias_add_kernels(r);
  detail::add_context_attention_kernels(r);
  // The guard against a family forgetting a kind: each one the executors run has a CPU kernel
  // for some dtype (the leaves placeholder and parameter are bound, never run).
  for (int k = 0; k < kNumOpKinds; ++k) {
    const auto kind = static_cast<OpKind>(k);
    if (kind == OpKind::kPlaceholder || kind == OpKind::kParameter) continue;
    bool any = false;
    for (int d = 0; d < KernelRegistry::kDTypes; ++d) any = any || r.find(kind, DeviceType::kCPU, static_cast<DType>(d)) != nullptr;
    HSPMD_ASSERT(any) << "op kind " << op_kind_name(kind) << " has no cpu kernel";
  }
  return r;
}

const KernelRegistry& KernelRegistry::standard() {
  static const KernelRegistry registry(build_cpu_kernels());
  return registry;
}

}  // namespace hspmd::graph
