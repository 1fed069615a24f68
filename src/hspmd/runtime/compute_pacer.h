// Emulated speed (runtime/emulation.h): the compute of a rank is stretched to 1 / speed of what
// this host needed, measured by the thread's CPU time so that waiting for a core is not taken for
// work.
//
//   ComputePacer pacer(d.speed);
//   pacer.begin(); run_kernels(); pacer.end();   // brackets compute on this thread
//   pacer.pad();                                  // before communicating: stretches it to 1 / speed
#pragma once

namespace hspmd::runtime {

// Time spent on compute: `cpu` is the work itself, `wall` what it took on the host.
struct ComputeTime {
  double cpu = 0;
  double wall = 0;
  ComputeTime& operator+=(const ComputeTime& o) {
    cpu += o.cpu;
    wall += o.wall;
    return *this;
  }
};

// Reads the clocks ComputeTime is made of. The work is timed by the calling thread's CPU clock, so
// that time spent waiting for a core on a busy host (other ranks, other processes) is not taken for
// work: on a loaded host, stretching wall time would multiply each wait by 1 / speed. When kernels
// run on several threads (kernels::num_threads() > 1) the calling thread's CPU clock sees only its
// own share of the work, so the work is timed by the wall clock instead (`cpu` = `wall`).
struct ComputeClock {
  double cpu = 0;
  double wall = 0;
  static ComputeClock now();
  ComputeTime since(const ComputeClock& start) const { return {cpu - start.cpu, wall - start.wall}; }
};

// Stretches compute to an emulated speed. A device at speed s needs c / s seconds for work this
// host did in c seconds of CPU time; the host already spent `wall` seconds on it, so only the
// difference is slept, and nothing when waiting for a core already took longer.
//
//   pacer.begin(); ...kernels...; pacer.end();   // any number of spans
//   pacer.pad();                                  // sleeps max(0, sum cpu / s - sum wall) and resets
class ComputePacer {
 public:
  explicit ComputePacer(double speed = 1.0);
  void begin();
  void end();
  void pad();
  // The padding rule: seconds to sleep after compute of `t` (throws on negative or non-finite times).
  double padding(const ComputeTime& t) const;
  // Compute bracketed since construction, slept padding excluded.
  const ComputeTime& total() const { return total_; }
  double speed() const { return speed_; }

 private:
  double speed_;
  ComputeClock start_;
  ComputeTime unpadded_;
  ComputeTime total_;
};

}  // namespace hspmd::runtime
