#include "hspmd/kernels/threading.h"

#include <omp.h>

#include "hspmd/core/error.h"
#include "hspmd/kernels/blas_library.h"

namespace hspmd::kernels {

// oneDNN runs on OpenMP, so the OpenMP count is also its count. OpenMP's thread count is per
// calling thread (its nthreads ICV): a rank running as a thread in a
// test process sets its own. OpenBLAS keeps one process-wide count; the last call wins
// (applied when it loads, see blas_library.h).
void set_num_threads(int n) {
  HSPMD_CHECK(n >= 1) << "set_num_threads: thread count must be >= 1, got " << n;
  omp_set_num_threads(n);
  set_blas_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

ScopedNumThreads::ScopedNumThreads(int n) : saved_(omp_get_max_threads()) {
  HSPMD_CHECK(n >= 1) << "ScopedNumThreads: thread count must be >= 1, got " << n;
  omp_set_num_threads(n);
}

ScopedNumThreads::~ScopedNumThreads() { omp_set_num_threads(saved_); }

void check_not_in_inactive_region(const char* what) {
  HSPMD_ASSERT(omp_get_level() == omp_get_active_level())
      << what << " on " << omp_get_max_threads() << " threads inside an inactive OpenMP parallel region (level "
      << omp_get_level() << ", active " << omp_get_active_level() << "): call it outside the region";
}

}  // namespace hspmd::kernels
