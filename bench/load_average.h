// The host's 1-minute load average, printed beside timings: a timing is faithful only while the load
// stays under the core count (other processes stretch a rank's busy time, and an emulated device's
// pacing stretches it again by 1 / speed).
#pragma once

#include <cstdio>

namespace hspmd::bench {

inline double load_average() {
  double one = 0;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &one) != 1) one = 0;
    std::fclose(f);
  }
  return one;
}

}  // namespace hspmd::bench
