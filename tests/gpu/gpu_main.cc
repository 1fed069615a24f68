// main() of every GPU test (label gpu): without a visible CUDA device the whole program reports
// "SKIPPED: no CUDA device" and exits 77, which ctest counts as skipped (SKIP_RETURN_CODE), never
// as passed.
#include <gtest/gtest.h>

#include <cstdio>

#include "hspmd/core/cuda/cuda_error.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (hspmd::cuda::device_count() == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  return RUN_ALL_TESTS();
}
