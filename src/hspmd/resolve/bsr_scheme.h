// BsrScheme (§5.3, Figure 11 right): who sends each slice of a BsrTable to each receiver, chosen
// by one scan over the table with three heuristics, in this order:
//   (i)   the receiver already owns the slice      -> local copy, no communication;
//   (ii)  otherwise the owner on the fastest link  (Topology::bandwidth(owner, receiver));
//   (iii) ties -> the owner that has sent the fewest bytes so far (then the lowest id).
// O(p * q * owners) for p entries and q receivers per entry with an explicit bandwidth matrix; with
// one inter-node bandwidth, O(p * (owners log owners + q * (node's owners + log owners))), which
// is linear in the ranks under data parallelism (bsr_scheme.cc says why). kLowestOwner (`--no-heuristics`)
// keeps (i) and otherwise takes the lowest-id owner: the paper's unfused baseline, which differs
// from the scheme in (ii) and (iii) only.
//
// The scheme turns into per-device ops with one message per (sender, receiver) pair — the "fused"
// send-receive of §7 — carrying that pair's pieces in table order:
//   device 1: LocalCopy [..] | Send peer=2 [..] [..] | Recv peer=0 [..]
// Ops on a device: its local copy first, then its sends by ascending peer, then its receives by
// ascending peer (the executor posts them as one batch).
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "hspmd/resolve/bsr_table.h"
#include "hspmd/resolve/comm_op.h"
#include "hspmd/resolve/topology.h"

namespace hspmd::resolve {

enum class BsrPolicy { kHeuristic, kLowestOwner };

struct BsrTransfer {
  int entry = 0;     // index into BsrTable::entries()
  int sender = 0;    // == receiver for a local copy
  int receiver = 0;
};

struct BsrScheme {
  std::vector<BsrTransfer> transfers;  // in scan order
  std::map<int, int64_t> bytes_sent;   // device -> bytes it sends (local copies excluded)

  // (sender, receiver) -> bytes, for every pair that exchanges a message.
  std::map<std::pair<int, int>, int64_t> pair_bytes(const BsrTable& table) const;
  DeviceOps device_ops(const BsrTable& table) const;
};

// topology == nullptr means all links are equal (then only (i) and (iii) decide).
BsrScheme plan_bsr(const BsrTable& table, const Topology* topology, BsrPolicy policy = BsrPolicy::kHeuristic);

}  // namespace hspmd::resolve
