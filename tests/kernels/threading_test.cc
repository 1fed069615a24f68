// set_num_threads drives both OpenMP (our kernels) and OpenBLAS (matmul); ScopedNumThreads
// narrows it for one block.
#include "hspmd/kernels/threading.h"

#include <gmock/gmock.h>
#include <omp.h>

#include "hspmd/core/error.h"
#include "hspmd/kernels/blas_library.h"

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

}  // namespace
}  // namespace hspmd::kernels
