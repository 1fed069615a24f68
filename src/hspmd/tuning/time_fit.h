#pragma once

// The profiler's fits of measured times: least squares of y = b (a s^2 + c1 s) + c0 over (s, b, y)
// samples with every coefficient >= 0 (noise must not make a longer sequence cheaper), and of
// y = per_token * tokens + constant, likewise.

#include <utility>
#include <vector>

#include "hspmd/planner/profile.h"

namespace hspmd::tuning {

struct TimeSample {
  double seq_len = 0;
  int micro_batch_size = 1;
  double seconds = 0;
};
planner::LayerTimeFit fit_layer_time(const std::vector<TimeSample>& samples);
planner::LinearFit fit_linear(const std::vector<std::pair<double, double>>& tokens_seconds);

}  // namespace hspmd::tuning
