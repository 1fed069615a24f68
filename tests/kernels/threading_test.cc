// set_num_threads drives both OpenMP (our kernels) and OpenBLAS (matmul); ScopedNumThreads
// narrows it for one block.
#include "hspmd/kernels/threading.h"

#include <gmock/gmock.h>
#include <omp.h>

#include <string>

#include "hspmd/core/error.h"
#include "hspmd/kernels/blas_library.h"
#include "hspmd/kernels/matmul.h"

namespace hspmd::kernels {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

int threads_in_parallel_region() {
  int n = 0;
#pragma omp parallel
  {
#pragma omp single
    n = omp_get_num_threads();
  }
  return n;
}

TEST(Threading, SetsOpenMPAndOpenBLAS) {
  const int before = num_threads();
  for (int n : {1, 3, 2}) {
    set_num_threads(n);
    EXPECT_EQ(num_threads(), n);
    EXPECT_EQ(threads_in_parallel_region(), n);
    EXPECT_EQ(blas_library().get_num_threads(), n);
  }
  set_num_threads(before);
}

TEST(Threading, RejectsNonPositiveCounts) {
  EXPECT_THAT([] { set_num_threads(0); },
              ThrowsMessage<Error>(HasSubstr("set_num_threads: thread count must be >= 1, got 0")));
  EXPECT_THAT([] { set_num_threads(-2); }, ThrowsMessage<Error>(HasSubstr("got -2")));
}

TEST(Threading, ScopedNumThreadsRestoresTheCallersCount) {
  const int before = num_threads();
  set_num_threads(3);
  {
    ScopedNumThreads serial(1);
    EXPECT_EQ(num_threads(), 1);
    EXPECT_EQ(threads_in_parallel_region(), 1);
    {
      ScopedNumThreads two(2);
      EXPECT_EQ(threads_in_parallel_region(), 2);
    }
    EXPECT_EQ(num_threads(), 1);
  }
  EXPECT_EQ(num_threads(), 3);
  EXPECT_EQ(threads_in_parallel_region(), 3);
  EXPECT_THAT([] { ScopedNumThreads none(0); },
              ThrowsMessage<Error>(HasSubstr("ScopedNumThreads: thread count must be >= 1, got 0")));
  EXPECT_EQ(num_threads(), 3);
  set_num_threads(before);
}

// A multi-threaded GEMM may run outside any region or inside an active one (it then runs on the
// calling thread), never inside an inactive one; and matmul never puts it there.
TEST(Threading, MultiThreadedCallsAreRefusedInsideAnInactiveRegion) {
  EXPECT_NO_THROW(check_not_in_inactive_region("gemm"));
  bool active_ok = true, inactive_threw = false;
#pragma omp parallel num_threads(2)
  {
    try {
      check_not_in_inactive_region("gemm");
    } catch (const Error&) {
#pragma omp critical
      active_ok = false;
    }
  }
  const bool inactive = true;
#pragma omp parallel if (!inactive)
  {
    try {
      check_not_in_inactive_region("gemm");
    } catch (const Error& e) {
      inactive_threw = std::string(e.what()).find("inside an inactive OpenMP parallel region") != std::string::npos;
    }
  }
  EXPECT_TRUE(active_ok);
  EXPECT_TRUE(inactive_threw);
  // A product above the single-thread threshold, as every Llama projection is.
  Tensor a = Tensor::full({512, 512}, DType::kFloat32, 0.5), b = Tensor::full({512, 512}, DType::kFloat32, 0.25);
  Tensor c = Tensor::empty({512, 512}, DType::kFloat32);
  EXPECT_NO_THROW(matmul(a, b, c, {.trans_b = true}));
  EXPECT_EQ(c.data<float>()[0], 512 * 0.125f);
}

}  // namespace
}  // namespace hspmd::kernels
