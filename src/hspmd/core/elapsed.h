// Seconds since a moment on the monotonic clock, for the durations every layer reports (training
// steps, switches, elastic recovery, planning, profiles, dispatch decisions):
//
//   const auto start = std::chrono::steady_clock::now();
//   ...
//   report.seconds = seconds_since(start);
#pragma once

#include <chrono>

namespace hspmd {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace hspmd
