#include "hspmd/kernels/threading.h"

#include <omp.h>

#include "hspmd/core/error.h"
#include "hspmd/kernels/blas_library.h"

namespace hspmd::kernels {

// OpenMP's thread count is per calling thread (its nthreads ICV): a rank running as a thread in a
// test process sets its own. OpenBLAS keeps one process-wide count; the last call wins.
void set_num_threads(int n) {
  HSPMD_CHECK(n >= 1) << "set_num_threads: thread count must be >= 1, got " << n;
  omp_set_num_threads(n);
  blas_library().set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace hspmd::kernels
