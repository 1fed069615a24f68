// The BSR scheme's heuristics (resolve/bsr_scheme.h) as the paper states them, one scan over every
// owner for every receiver of every slice: the oracle the product's scheme, which avoids pricing
// every owner (see bsr_scheme.cc), must equal transfer for transfer.
#pragma once

#include "hspmd/resolve/bsr_scheme.h"

namespace hspmd::resolve::testing {

BsrScheme reference_plan_bsr(const BsrTable& table, const Topology* topology,
                             BsrPolicy policy = BsrPolicy::kHeuristic);

}  // namespace hspmd::resolve::testing
