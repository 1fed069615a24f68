#include "hspmd/runtime/compute_pacer.h"

#include <time.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "hspmd/core/error.h"
#include "hspmd/kernels/threading.h"

namespace hspmd::runtime {

ComputeClock ComputeClock::now() {
  ComputeClock c;
  c.wall = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  if (kernels::num_threads() > 1) {
    c.cpu = c.wall;  // see the header: one thread's CPU clock would miss the other threads' work
    return c;
  }
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  c.cpu = static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  return c;
}

ComputePacer::ComputePacer(double speed) : speed_(speed) {
  HSPMD_CHECK(speed > 0 && speed <= 1) << "compute pacer: speed must be in (0, 1], got " << speed;
}

void ComputePacer::begin() { start_ = ComputeClock::now(); }

void ComputePacer::end() {
  const ComputeTime t = ComputeClock::now().since(start_);
  unpadded_ += t;
  total_ += t;
}

double ComputePacer::padding(const ComputeTime& t) const {
  HSPMD_CHECK(std::isfinite(t.cpu) && t.cpu >= 0 && std::isfinite(t.wall) && t.wall >= 0)
      << "compute pacer: compute times must be finite numbers of seconds >= 0, got cpu " << t.cpu << ", wall "
      << t.wall;
  return std::max(0.0, t.cpu / speed_ - t.wall);
}

void ComputePacer::pad() {
  const double sleep = speed_ == 1.0 ? 0.0 : padding(unpadded_);
  unpadded_ = {};
  if (sleep > 0) std::this_thread::sleep_for(std::chrono::duration<double>(sleep));
}

}  // namespace hspmd::runtime
