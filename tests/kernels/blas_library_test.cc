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
  const BlasLibrary& blas = blas_library();
  ASSERT_NE(blas.sgemm, nullptr);
  ASSERT_NE(blas.dgemm, nullptr);
  const char* after = std::getenv("OPENBLAS_CORETYPE");
  EXPECT_EQ(after != nullptr ? std::string(after) : "", user);
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

TEST(BlasLibrary, SgemmThroughTheLoadedLibraryComputes) {
  Tensor a = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = Tensor::from_vector<float>({3, 2}, {1, 0, 0, 1, 1, 1});
  Tensor c = Tensor::empty({2, 2}, DType::kFloat32);
  matmul(a, b, c);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{4, 5, 10, 11}));
}

}  // namespace
}  // namespace hspmd::kernels
