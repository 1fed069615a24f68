// What `hspmd selfcheck` runs on a GPU (kernels/cuda/selfcheck.h) passes on this device, and a
// check's verdict follows its error.
#include "hspmd/kernels/cuda/selfcheck.h"

#include <gtest/gtest.h>

#include <cmath>

namespace hspmd::kernels::cuda {
namespace {

TEST(CudaSelfcheck, EveryKernelPassesOnDevice0) {
  const std::vector<KernelCheck> checks = check_against_cpu(0);
  EXPECT_GE(checks.size(), 5u);
  for (const KernelCheck& c : checks) {
    EXPECT_TRUE(c.pass()) << c.name << ": error " << c.error << ", tolerance " << c.tolerance;
    EXPECT_GT(c.tolerance, 0) << c.name;
  }
}

TEST(CudaSelfcheck, NanOrALargeErrorFails) {
  EXPECT_FALSE((KernelCheck{"x", NAN, 1e-5}).pass());
  EXPECT_FALSE((KernelCheck{"x", 2e-5, 1e-5}).pass());
  EXPECT_TRUE((KernelCheck{"x", 1e-6, 1e-5}).pass());
}

}  // namespace
}  // namespace hspmd::kernels::cuda
