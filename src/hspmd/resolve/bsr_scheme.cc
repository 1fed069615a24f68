#include "hspmd/resolve/bsr_scheme.h"

#include <algorithm>

#include "hspmd/core/error.h"

namespace hspmd::resolve {

BsrScheme plan_bsr(const BsrTable& table, const Topology* topology, BsrPolicy policy) {
  BsrScheme scheme;
  const auto& entries = table.entries();
  for (int i = 0; i < static_cast<int>(entries.size()); ++i) {
    const BsrEntry& e = entries[i];
    for (int r : e.receivers) {
      int sender = e.owners.front();
      if (std::binary_search(e.owners.begin(), e.owners.end(), r)) {
        sender = r;  // (i) owned: local copy, whatever the policy (no scheme sends what is there)
      } else if (policy == BsrPolicy::kHeuristic) {
        double best_bw = -1;
        int64_t best_sent = 0;
        for (int o : e.owners) {  // ascending, so strict comparisons keep the lowest id on ties
          const double bw = topology ? topology->bandwidth(o, r) : 1.0;
          const int64_t sent = scheme.bytes_sent[o];
          if (bw > best_bw || (bw == best_bw && sent < best_sent)) {  // (ii), then (iii)
            best_bw = bw;
            best_sent = sent;
            sender = o;
          }
        }
      }
      if (sender != r) scheme.bytes_sent[sender] += e.bytes;
      scheme.transfers.push_back({i, sender, r});
    }
  }
  return scheme;
}

std::map<std::pair<int, int>, int64_t> BsrScheme::pair_bytes(const BsrTable& table) const {
  std::map<std::pair<int, int>, int64_t> out;
  for (const BsrTransfer& t : transfers) {
    if (t.sender != t.receiver) out[{t.sender, t.receiver}] += table.entries()[t.entry].bytes;
  }
  return out;
}

DeviceOps BsrScheme::device_ops(const BsrTable& table) const {
  std::map<int, CommOp> local;
  std::map<std::pair<int, int>, CommOp> sends, recvs;  // keyed (device, peer)
  for (const BsrTransfer& t : transfers) {
    const BsrEntry& e = table.entries()[t.entry];
    const Piece piece{e.tensor, e.slice};
    if (t.sender == t.receiver) {
      CommOp& op = local[t.sender];
      op.kind = CommKind::kLocalCopy;
      op.pieces.push_back(piece);
      continue;
    }
    CommOp& s = sends[{t.sender, t.receiver}];
    s.kind = CommKind::kSend;
    s.peer = t.receiver;
    s.pieces.push_back(piece);
    s.bytes += e.bytes;
    CommOp& r = recvs[{t.receiver, t.sender}];
    r.kind = CommKind::kRecv;
    r.peer = t.sender;
    r.pieces.push_back(piece);
  }
  DeviceOps ops;
  for (auto& [dev, op] : local) ops[dev].push_back(std::move(op));
  for (auto& [key, op] : sends) ops[key.first].push_back(std::move(op));
  for (auto& [key, op] : recvs) ops[key.first].push_back(std::move(op));
  return ops;
}

}  // namespace hspmd::resolve
