// blas_library: the core type chosen from CPU features, and the library loaded with it.
#include "hspmd/kernels/blas_library.h"

#include <gmock/gmock.h>

#include <cstdlib>
#include <strings.h>

#include "hspmd/core/tensor.h"
#include "hspmd/kernels/matmul.h"

namespace hspmd::kernels {
namespace {

using ::testing::HasSubstr;

CpuFeatures avx2_fma(bool amd) {
  CpuFeatures f;
  f.avx = f.avx2 = f.fma = true;
  f.amd = amd;
  return f;
}

TEST(BlasLibrary, CoreTypeFollowsInstructionSetsNotTheModel) {
  CpuFeatures avx512 = avx2_fma(false);
  avx512.avx512f = avx512.avx512bw = avx512.avx512dq = avx512.avx512vl = true;
  EXPECT_EQ(openblas_core_for(avx512), "SkylakeX");
  avx512.amd = true;  // AMD Zen 4 has the same AVX-512 subsets
  EXPECT_EQ(openblas_core_for(avx512), "SkylakeX");
  CpuFeatures only_f = avx2_fma(false);
  only_f.avx512f = true;  // Xeon Phi style AVX-512 without BW/DQ/VL: SkylakeX kernels would fault
  EXPECT_EQ(openblas_core_for(only_f), "Haswell");
  EXPECT_EQ(openblas_core_for(avx2_fma(false)), "Haswell");
  EXPECT_EQ(openblas_core_for(avx2_fma(true)), "Zen");
  CpuFeatures avx;
  avx.avx = true;
  EXPECT_EQ(openblas_core_for(avx), "Sandybridge");
  EXPECT_EQ(openblas_core_for(CpuFeatures{}), "");
}

TEST(BlasLibrary, LoadsWithTheRequestedKernelsAndLeavesTheEnvironmentAsItWas) {
  const char* before = std::getenv("OPENBLAS_CORETYPE");
  const std::string user = before != nullptr ? before : "";
  const char* timeout_before = std::getenv("OPENBLAS_THREAD_TIMEOUT");
  const std::string user_timeout = timeout_before != nullptr ? timeout_before : "";
  const BlasLibrary& blas = blas_library();
  ASSERT_NE(blas.sgemm, nullptr);
  ASSERT_NE(blas.dgemm, nullptr);
  // This test links the kernels only, none of which links OpenBLAS: hspmd is the one that loads it.
  ASSERT_FALSE(blas.loaded_before);
  const char* after = std::getenv("OPENBLAS_CORETYPE");
  EXPECT_EQ(after != nullptr ? std::string(after) : "", user);
  const char* timeout_after = std::getenv("OPENBLAS_THREAD_TIMEOUT");
  EXPECT_EQ(timeout_after != nullptr ? std::string(timeout_after) : "", user_timeout);
  if (!user.empty()) {
    EXPECT_TRUE(blas.requested_by_user);
    EXPECT_EQ(blas.requested_core, user);
  } else {
    EXPECT_FALSE(blas.requested_by_user);
    EXPECT_EQ(blas.requested_core, openblas_core_for(CpuFeatures::detect()));
    // OpenBLAS reports the kernels it runs: those we asked for (its names differ only in case).
    if (!blas.requested_core.empty()) {
      EXPECT_EQ(strcasecmp(blas.core.c_str(), blas.requested_core.c_str()), 0)
          << "asked for " << blas.requested_core << ", OpenBLAS runs " << blas.core;
    }
  }
  EXPECT_THAT(blas.describe(), HasSubstr("kernels " + blas.core));
  EXPECT_THAT(blas.config, HasSubstr("OpenBLAS"));
}

// Where a linked library loaded OpenBLAS at startup (the hspmd program: CoinUtils needs LAPACK), the
// kernels are OpenBLAS's own choice, and the description says so instead of claiming hspmd's.
TEST(BlasLibrary, DescriptionTellsWhenOpenBlasChoseAtStartup) {
  BlasLibrary lib;
  lib.path = "/lib/libopenblas.so.0";
  lib.core = "Prescott";
  lib.requested_core = "SkylakeX";
  lib.loaded_before = true;
  EXPECT_THAT(lib.describe(), HasSubstr("kernels Prescott (chosen by OpenBLAS at startup"));
  EXPECT_THAT(lib.describe(), HasSubstr("OPENBLAS_CORETYPE=SkylakeX would select the CPU's"));
  lib.loaded_before = false;
  lib.core = "SkylakeX";
  EXPECT_THAT(lib.describe(), HasSubstr("kernels SkylakeX (chosen by hspmd from CPU features)"));
}

TEST(BlasLibrary, SgemmThroughTheLoadedLibraryComputes) {
  Tensor a = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = Tensor::from_vector<float>({3, 2}, {1, 0, 0, 1, 1, 1});
  Tensor c = Tensor::empty({2, 2}, DType::kFloat32);
  matmul(a, b, c);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{4, 5, 10, 11}));
}

}  // namespace
}  // namespace hspmd::kernels
