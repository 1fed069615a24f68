// Learning-rate schedules, as a function of the optimizer step (counted from 1):
//
//   LrSchedule s = LrSchedule::warmup_cosine({.peak_lr = 1e-3, .min_lr = 1e-4,
//                                             .warmup_steps = 10, .total_steps = 100});
//   s.at(1)   == 1e-4     // linear warm-up: peak * step / warmup_steps
//   s.at(10)  == 1e-3     // peak at the end of warm-up
//   s.at(55)  == 5.5e-4   // cosine half-way: min + (peak - min) * 0.5 * (1 + cos(pi * 0.5))
//   s.at(100) == 1e-4     // min_lr from total_steps on
//
// Constant: LrSchedule::constant(3e-4).at(step) == 3e-4 for every step.
#pragma once

#include <cstdint>
#include <string>

namespace hspmd::graph {

class LrSchedule {
 public:
  struct WarmupCosine {
    double peak_lr = 1e-3;
    double min_lr = 0.0;        // reached at total_steps and kept afterwards
    int64_t warmup_steps = 0;   // 0: start at peak_lr
    int64_t total_steps = 1;    // >= warmup_steps
  };

  static LrSchedule constant(double lr);
  static LrSchedule warmup_cosine(const WarmupCosine& options);

  double at(int64_t step) const;  // step >= 1
  std::string to_string() const;

 private:
  bool cosine_ = false;
  WarmupCosine options_;
};

}  // namespace hspmd::graph
