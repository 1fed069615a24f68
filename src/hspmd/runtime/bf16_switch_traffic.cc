#include "hspmd/runtime/bf16_switch_traffic.h"

#include <cstdio>
#include <sstream>

#include "hspmd/core/byte_size.h"

namespace hspmd::runtime {

namespace {

int64_t total(const std::map<resolve::LinkTier, int64_t>& by_tier) {
  int64_t sum = 0;
  for (const auto& [tier, bytes] : by_tier) sum += bytes;
  return sum;
}

nlohmann::json tiers_json(const std::map<resolve::LinkTier, int64_t>& by_tier) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [tier, bytes] : by_tier) out[resolve::link_tier_name(tier)] = bytes;
  return out;
}

std::string tiers_text(const std::map<resolve::LinkTier, int64_t>& by_tier) {
  std::ostringstream out;
  for (const auto& [tier, bytes] : by_tier) out << " [" << resolve::link_tier_name(tier) << " " << bytes << " bytes]";
  return out.str();
}

}  // namespace

int64_t Bf16SwitchTraffic::params_out_bytes() const { return total(params_out_by_tier); }
int64_t Bf16SwitchTraffic::grads_back_bytes() const { return total(grads_back_by_tier); }

nlohmann::json Bf16SwitchTraffic::to_json() const {
  return {{"plan", plan},
          {"base", base},
          {"params_out_bytes", params_out_bytes()},
          {"params_out_bytes_by_tier", tiers_json(params_out_by_tier)},
          {"params_out_wire_bytes_by_tier", tiers_json(params_out_wire_by_tier)},
          {"grads_back_bytes", grads_back_bytes()},
          {"grads_back_bytes_by_tier", tiers_json(grads_back_by_tier)},
          {"grads_back_wire_bytes_by_tier", tiers_json(grads_back_wire_by_tier)},
          {"params_out_seconds", params_out_seconds},
          {"grads_back_seconds", grads_back_seconds}};
}

std::string Bf16SwitchTraffic::to_string() const {
  std::ostringstream out;
  out << "  | bf16 switch " << base << " -> " << plan << ": params out " << format_bytes(params_out_bytes())
      << tiers_text(params_out_wire_by_tier) << ", grads back " << format_bytes(grads_back_bytes())
      << tiers_text(grads_back_wire_by_tier);
  char times[64];
  std::snprintf(times, sizeof times, "; %.3fs + %.3fs", params_out_seconds, grads_back_seconds);
  out << times;
  return out.str();
}

}  // namespace hspmd::runtime
