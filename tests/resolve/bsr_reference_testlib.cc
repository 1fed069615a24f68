#include "resolve/bsr_reference_testlib.h"

#include <algorithm>

namespace hspmd::resolve::testing {

BsrScheme reference_plan_bsr(const BsrTable& table, const Topology* topology, BsrPolicy policy) {
  BsrScheme scheme;
  const auto& entries = table.entries();
  for (int i = 0; i < static_cast<int>(entries.size()); ++i) {
    const BsrEntry& e = entries[i];
    for (int r : e.receivers()) {
      int sender = e.owners().front();
      if (std::binary_search(e.owners().begin(), e.owners().end(), r)) {
        sender = r;  // (i)
      } else if (policy == BsrPolicy::kHeuristic) {
        double best_bw = -1;
        int64_t best_sent = 0;
        for (int o : e.owners()) {  // ascending, so strict comparisons keep the lowest id on ties
          const double bw = topology ? topology->bandwidth(o, r) : 1.0;
          const int64_t sent = scheme.bytes_sent[o];
          if (bw > best_bw || (bw == best_bw && sent < best_sent)) {  // (ii), then (iii)
            best_bw = bw;
            best_sent = sent;
            sender = o;
          }
        }
      }
      if (sender != r) scheme.bytes_sent[sender] += e.bytes();
      scheme.transfers.push_back({i, sender, r});
    }
  }
  return scheme;
}

}  // namespace hspmd::resolve::testing
