// Thread count used by every CPU kernel (OpenMP, which oneDNN's GEMMs share) and by OpenBLAS. A
// process running one rank per core sets 1; the default is the number of cores.
#pragma once

namespace hspmd::kernels {

void set_num_threads(int n);  // n >= 1; throws Error otherwise
int num_threads();

// Runs the enclosed kernels on `n` threads, then restores the caller's count (OpenMP's count is
// per calling thread, so this touches no other rank). For work too small to pay for a fork/join:
// on a busy host a parallel region can wait a whole time slice for its second thread.
class ScopedNumThreads {
 public:
  explicit ScopedNumThreads(int n);
  ~ScopedNumThreads();
  ScopedNumThreads(const ScopedNumThreads&) = delete;
  ScopedNumThreads& operator=(const ScopedNumThreads&) = delete;

 private:
  int saved_;
};

// For a library call that runs its own OpenMP region (a multi-threaded GEMM): an internal error when
// the caller is inside an inactive region (`omp parallel if (false)`). A region nested there gets a
// team of its own, for which libgomp started a new thread on every call while the pool's thread
// spun idle, so the cores were oversubscribed (docs/cpu-kernels.md, "GEMM").
void check_not_in_inactive_region(const char* what);

}  // namespace hspmd::kernels
