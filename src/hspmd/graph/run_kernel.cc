#include "hspmd/graph/run_kernel.h"

#include <exception>

#include "hspmd/core/error.h"

namespace hspmd::graph {

std::string op_label(const Op& op, int rank) {
  std::string label = rank >= 0 ? "rank " + std::to_string(rank) + ", " : "";
  return label + "op '" + op.name + "' (" + std::string(op_kind_name(op.kind)) + ")";
}

void run_kernel(KernelContext& ctx, const KernelRun& how) {
  const Op& op = ctx.op;
  const KernelRegistry& kernels = how.kernels != nullptr ? *how.kernels : KernelRegistry::standard();
  const Kernel& kernel = kernels.get(op, how.device);
  // The wrapper keeps the original inside (std::throw_with_nested) and its origin as its own, so
  // the chain of messages and the source place of the first one both survive.
  try {
    kernel(ctx);
  } catch (const OutOfMemoryError& e) {
    std::throw_with_nested(OutOfMemoryError(op_label(op, how.rank) + ": " + e.what(), e.origin()));
  } catch (const Error& e) {
    std::throw_with_nested(Error(op_label(op, how.rank) + ": " + e.what(), e.origin()));
  } catch (const std::exception& e) {
    std::throw_with_nested(Error(op_label(op, how.rank) + ": " + e.what()));
  }
  HSPMD_ASSERT(ctx.outputs.size() == op.outputs.size())
      << op_label(op, how.rank) << ": the kernel produced " << ctx.outputs.size() << " outputs, the op declares "
      << op.outputs.size();
  for (size_t i = 0; i < ctx.outputs.size(); ++i) {
    const Tensor& out = ctx.outputs[i];
    HSPMD_ASSERT(out.defined() && out.shape() == ctx.output_shapes.at(i) && out.dtype() == op.outputs[i].dtype)
        << op_label(op, how.rank) << ": output " << i << " is " << (out.defined() ? out.to_string() : "undefined")
        << ", expected " << dtype_name(op.outputs[i].dtype) << ctx.output_shapes.at(i).to_string();
  }
}

}  // namespace hspmd::graph
