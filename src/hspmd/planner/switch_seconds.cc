#include "hspmd/planner/switch_seconds.h"

#include <algorithm>
#include <map>

namespace hspmd::planner {

double bsr_seconds(const resolve::FusedBsr& bsr, const resolve::Topology& topology) {
  std::map<int, double> out, in;
  for (const resolve::BsrMessage& m : bsr.messages()) {
    const double t = static_cast<double>(m.bytes) / topology.bandwidth(m.sender, m.receiver);
    out[m.sender] += t;
    in[m.receiver] += t;
  }
  double worst = 0;
  for (const auto& [rank, t] : out) worst = std::max(worst, t);
  for (const auto& [rank, t] : in) worst = std::max(worst, t);
  return worst;
}

}  // namespace hspmd::planner
