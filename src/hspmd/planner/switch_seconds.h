// The predicted duration of a fused BSR (resolve/fused_bsr.h): each sender's and each receiver's
// messages one after the other at their links' bandwidths (resolve::Topology::bandwidth, so each
// message at its link tier's figure), all senders in parallel, so the switch takes as long as the
// busiest sender or receiver. The one price of a state movement that the per-batch strategy choice
// (planner/length_strategies.h) and the simulator (planner/simulator.h) both use.
#pragma once

#include "hspmd/resolve/fused_bsr.h"
#include "hspmd/resolve/topology.h"

namespace hspmd::planner {

double bsr_seconds(const resolve::FusedBsr& bsr, const resolve::Topology& topology);

}  // namespace hspmd::planner
