// What one step under a bf16-only switch moved (switching/bf16_switch_plan.h): the bf16 parameter
// values out of the base layout before the forward pass, and the float32 gradients back after the
// backward pass, each as planned and as measured on the wire, per link tier. Carried by the step's
// StepMetrics, so the step log and the --metrics line show it.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "hspmd/resolve/topology.h"

namespace hspmd::runtime {

struct Bf16SwitchTraffic {
  std::string plan;  // the plan the step computed under
  std::string base;  // the plan holding the master weights and moments
  // Planned (every rank's plan alike) and measured (the bytes each rank handed to its sends, summed
  // over the ranks by the link tier between sender and receiver).
  std::map<resolve::LinkTier, int64_t> params_out_by_tier, params_out_wire_by_tier;
  std::map<resolve::LinkTier, int64_t> grads_back_by_tier, grads_back_wire_by_tier;
  double params_out_seconds = 0;  // the slowest rank's BSR
  double grads_back_seconds = 0;

  int64_t params_out_bytes() const;
  int64_t grads_back_bytes() const;
  nlohmann::json to_json() const;
  std::string to_string() const;  // appended to the step's log line
};

}  // namespace hspmd::runtime
