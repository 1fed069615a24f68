// A process-wide setting of the CPU backend (which GEMM library, which SIMD level): read from the
// environment at first use, replaceable later (tests force each choice). Lock-free: the hot paths
// read it on every kernel call.
//
//   EnvironmentChoice<SimdLevel> g_level{level_from_environment};
//   g_level.get();                  // first call reads the environment
//   g_level.set(SimdLevel::kAvx2);  // between kernels
#pragma once

#include <atomic>

namespace hspmd::kernels::cpu {

template <typename Enum>
class EnvironmentChoice {
 public:
  explicit constexpr EnvironmentChoice(Enum (*from_environment)()) : from_environment_(from_environment) {}

  Enum get() {
    int v = value_.load(std::memory_order_acquire);
    if (v < 0) {
      // Concurrent first calls compute the same value; the first store wins.
      int expected = -1;
      value_.compare_exchange_strong(expected, static_cast<int>(from_environment_()));
      v = value_.load(std::memory_order_acquire);
    }
    return static_cast<Enum>(v);
  }
  void set(Enum value) { value_.store(static_cast<int>(value), std::memory_order_release); }

 private:
  Enum (*from_environment_)();
  std::atomic<int> value_{-1};  // -1 until the first get()
};

}  // namespace hspmd::kernels::cpu
