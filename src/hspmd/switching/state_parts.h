// The trained state of one parameter: its value and AdamW's two moments. Checkpoints store each part
// as a tensor named after the parameter ("<name>", "<name>.exp_avg", "<name>.exp_avg_sq"), and a
// switch plan lists them in this order parameter by parameter (switching/switch_plan.h), so the
// trainer, its checkpoints and the switch all name a part the same way, never by index arithmetic.
//
//   state_tensor_name("lm_head.weight", StatePart::kExpAvgSq)   // "lm_head.weight.exp_avg_sq"
//   parse_state_tensor_name("lm_head.weight.exp_avg")           // {"lm_head.weight", kExpAvg}
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace hspmd::switching {

enum class StatePart {
  kValue,     // the parameter (master weights, float32); the parameter's own annotation
  kExpAvg,    // AdamW's first moment m; the optimizer-state annotation (the ZeRO-1 shard)
  kExpAvgSq,  // AdamW's second moment v; likewise
};
inline constexpr std::array<StatePart, 3> kStateParts{StatePart::kValue, StatePart::kExpAvg, StatePart::kExpAvgSq};

// "", ".exp_avg" or ".exp_avg_sq".
constexpr std::string_view state_part_suffix(StatePart part) {
  switch (part) {
    case StatePart::kValue:
      return "";
    case StatePart::kExpAvg:
      return ".exp_avg";
    case StatePart::kExpAvgSq:
      return ".exp_avg_sq";
  }
  return "";
}

inline std::string state_tensor_name(const std::string& param, StatePart part) {
  return param + std::string(state_part_suffix(part));
}

struct StateTensorName {
  std::string param;
  StatePart part = StatePart::kValue;
};

// The inverse of state_tensor_name: a name without a moment's suffix is a value.
inline StateTensorName parse_state_tensor_name(const std::string& name) {
  for (StatePart part : {StatePart::kExpAvgSq, StatePart::kExpAvg}) {  // the longer suffix first
    const std::string_view suffix = state_part_suffix(part);
    if (name.ends_with(suffix)) return {name.substr(0, name.size() - suffix.size()), part};
  }
  return {name, StatePart::kValue};
}

}  // namespace hspmd::switching
