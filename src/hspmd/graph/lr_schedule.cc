#include "hspmd/graph/lr_schedule.h"

#include <cmath>
#include <numbers>
#include <sstream>

#include "hspmd/core/error.h"

namespace hspmd::graph {

LrSchedule LrSchedule::constant(double lr) {
  HSPMD_CHECK(lr >= 0) << "learning rate must be >= 0, got " << lr;
  LrSchedule s;
  s.options_.peak_lr = lr;
  return s;
}

LrSchedule LrSchedule::warmup_cosine(const WarmupCosine& options) {
  HSPMD_CHECK(options.peak_lr >= 0 && options.min_lr >= 0 && options.min_lr <= options.peak_lr)
      << "warm-up cosine schedule needs 0 <= min_lr (" << options.min_lr << ") <= peak_lr (" << options.peak_lr
      << ")";
  HSPMD_CHECK(options.warmup_steps >= 0 && options.total_steps >= 1 && options.warmup_steps <= options.total_steps)
      << "warm-up cosine schedule needs 0 <= warmup_steps (" << options.warmup_steps << ") <= total_steps ("
      << options.total_steps << ")";
  LrSchedule s;
  s.cosine_ = true;
  s.options_ = options;
  return s;
}

double LrSchedule::at(int64_t step) const {
  HSPMD_CHECK(step >= 1) << "learning-rate schedule: steps count from 1, got " << step;
  const WarmupCosine& o = options_;
  if (!cosine_) return o.peak_lr;
  if (step <= o.warmup_steps) return o.peak_lr * static_cast<double>(step) / static_cast<double>(o.warmup_steps);
  if (step >= o.total_steps) return o.min_lr;
  double progress = static_cast<double>(step - o.warmup_steps) / static_cast<double>(o.total_steps - o.warmup_steps);
  return o.min_lr + (o.peak_lr - o.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

std::string LrSchedule::to_string() const {
  std::ostringstream out;
  if (!cosine_) {
    out << "constant(" << options_.peak_lr << ")";
  } else {
    out << "warmup_cosine(peak " << options_.peak_lr << ", min " << options_.min_lr << ", warmup "
        << options_.warmup_steps << ", total " << options_.total_steps << ")";
  }
  return out.str();
}

}  // namespace hspmd::graph
