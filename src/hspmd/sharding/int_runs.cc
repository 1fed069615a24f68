#include "hspmd/sharding/int_runs.h"

namespace hspmd::sharding {

std::string runs_text(const std::vector<int>& values, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1) ++j;
    if (i > 0) out += ",";
    out += std::to_string(values[i]);
    if (j > i) {
      out += sep;
      out += std::to_string(values[j]);
    }
    i = j + 1;
  }
  return out;
}

}  // namespace hspmd::sharding
