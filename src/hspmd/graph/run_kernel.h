// run_kernel: the one way an op's kernel runs, for the single-device Executor and the distributed
// runtime alike. It picks the kernel registered for (op kind, device type, dtype), runs it, and
// checks what it produced against what the op's shape rule declared.
//
//   KernelContext ctx{op, inputs, output_shapes, allocator, {}, {}};
//   run_kernel(ctx, {.rank = 2});        // ctx.outputs: one tensor per op output
//
// Errors name the op: a kernel's Error "embedding: id 9 is outside the table's 4 rows" comes out
// as "rank 2, op 'lookup' (embedding): embedding: id 9 is outside ..." (no "rank" where none is
// given), of the same type when it was an OutOfMemoryError (the planner and elastic recovery catch
// that one), with the original nested inside (std::rethrow_if_nested returns it) and its origin,
// the source place `hspmd --verbose` prints, kept. An output of another shape or dtype than
// declared is an internal error: a kernel that does not keep the shape rule's contract.
#pragma once

#include <string>

#include "hspmd/graph/kernel_registry.h"

namespace hspmd::graph {

struct KernelRun {
  const KernelRegistry* kernels = nullptr;  // nullptr: KernelRegistry::standard() (the CPU kernels)
  DeviceType device = DeviceType::kCPU;     // where the op's tensors live: whose kernel runs it
  int rank = -1;                            // named in errors when >= 0 (the distributed runtime)
};

void run_kernel(KernelContext& ctx, const KernelRun& how = {});

// "rank 2, op 'lookup' (embedding)", or "op 'lookup' (embedding)" for rank -1: how errors name an op.
std::string op_label(const Op& op, int rank = -1);

}  // namespace hspmd::graph
