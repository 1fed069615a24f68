// The CUDA kernels against the CPU kernels on small random inputs of odd sizes, for
// `hspmd selfcheck` on a machine with a GPU: one scale-aware error per kernel (max |gpu - cpu| /
// max |cpu|) against a tolerance (float32: the order of additions; bfloat16: its rounding). The
// full comparisons, every dtype and edge case, are the GPU tests (tests/gpu/).
#pragma once

#include <string>
#include <vector>

namespace hspmd::kernels::cuda {

struct KernelCheck {
  std::string name;
  double error = 0;
  double tolerance = 0;
  bool pass() const { return error <= tolerance; }  // false for NaN
};

// Runs every check on `device`. Throws Error when a CUDA call fails.
std::vector<KernelCheck> check_against_cpu(int device);

}  // namespace hspmd::kernels::cuda
