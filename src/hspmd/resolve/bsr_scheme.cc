#include "hspmd/resolve/bsr_scheme.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

#include "hspmd/core/error.h"

namespace hspmd::resolve {

namespace {

// Choosing the sender of one slice for one receiver by heuristics (ii) and (iii): the owner that
// minimizes (-bandwidth to the receiver, bytes sent so far, id). Scanning every owner for every
// receiver costs owners x receivers per slice, and with data parallelism both grow with the ranks
// (a replicated slice has one owner and one receiver per replica), so the whole plan would grow
// with the square of the ranks. When every inter-node link has one bandwidth
// (Topology::uniform_inter_node_bandwidth) the owners split into those on the receiver's node, each
// priced from the matrix, and all the others, which tie on bandwidth: among those the best is the
// first of the owners ordered by (bytes sent, id) that is not on the receiver's node. That order is
// kept per slice in a set, so a receiver costs its node's owners plus a logarithm.
class SenderChooser {
 public:
  SenderChooser(const Topology* topology, int devices) : topology_(topology), sent_(devices, 0), touched_(devices, 0) {
    if (topology_ == nullptr) {
      remote_bandwidth_ = 1.0;  // all links equal: every owner is "remote" with the same bandwidth
    } else if (auto bw = topology_->uniform_inter_node_bandwidth()) {
      remote_bandwidth_ = *bw;
      node_of_.resize(devices);
      for (int d = 0; d < std::min(devices, topology_->num_devices()); ++d) node_of_[d] = topology_->device(d).node;
    }
  }

  // Starts a new entry; its owners ascending.
  void start(const std::vector<int>& owners) {
    owners_ = &owners;
    by_sent_.clear();
    by_node_.clear();
    by_sent_valid_ = false;
    for (int o : owners) touched_[o] = 1;  // the scan's map lists every owner it priced
    if (remote_bandwidth_ && topology_ != nullptr) {
      // Topology::device names a device the cluster lacks, as pricing its link would.
      for (int o : owners) by_node_.emplace_back(topology_->device(o).node, o);
      std::sort(by_node_.begin(), by_node_.end());
    }
  }

  int choose(int receiver) {
    if (!remote_bandwidth_) return scan(receiver);
    Candidate best;
    const int node = topology_ ? topology_->device(receiver).node : -1;
    if (topology_ != nullptr) {
      auto it = std::lower_bound(by_node_.begin(), by_node_.end(), std::make_pair(node, -1));
      for (; it != by_node_.end() && it->first == node; ++it) {
        best = better(best, {topology_->bandwidth(it->second, receiver), sent_[it->second], it->second});
      }
    }
    // A remote owner can only win when no node-local owner beats the remote bandwidth outright.
    if (best.owner < 0 || best.bandwidth <= *remote_bandwidth_) {
      if (!by_sent_valid_) {
        for (int o : *owners_) by_sent_.emplace(sent_[o], o);
        by_sent_valid_ = true;
      }
      for (const auto& [sent, o] : by_sent_) {
        if (topology_ != nullptr && node_of_[o] == node) continue;
        best = better(best, {*remote_bandwidth_, sent, o});
        break;
      }
    }
    return best.owner;
  }

  void add_sent(int device, int64_t bytes) {
    if (by_sent_valid_ && std::binary_search(owners_->begin(), owners_->end(), device)) {
      by_sent_.erase({sent_[device], device});
      by_sent_.emplace(sent_[device] + bytes, device);
    }
    sent_[device] += bytes;
  }

  // device -> bytes sent, listing every owner ever priced (with 0 when it sent nothing).
  std::map<int, int64_t> bytes_sent() const {
    std::map<int, int64_t> out;
    for (int d = 0; d < static_cast<int>(sent_.size()); ++d) {
      if (touched_[d] || sent_[d] != 0) out.emplace_hint(out.end(), d, sent_[d]);
    }
    return out;
  }

 private:
  struct Candidate {
    double bandwidth = -1;
    int64_t sent = 0;
    int owner = -1;
  };
  static Candidate better(const Candidate& a, const Candidate& b) {
    if (a.owner < 0) return b;
    if (a.bandwidth != b.bandwidth) return a.bandwidth > b.bandwidth ? a : b;
    if (a.sent != b.sent) return a.sent < b.sent ? a : b;
    return a.owner < b.owner ? a : b;
  }
  // Any topology: every owner priced (ascending, so strict comparisons keep the lowest id on ties).
  int scan(int receiver) const {
    Candidate best;
    for (int o : *owners_) best = better(best, {topology_->bandwidth(o, receiver), sent_[o], o});
    return best.owner;
  }

  const Topology* topology_;
  std::optional<double> remote_bandwidth_;
  std::vector<int> node_of_;
  std::vector<int64_t> sent_;
  std::vector<char> touched_;
  const std::vector<int>* owners_ = nullptr;
  std::vector<std::pair<int, int>> by_node_;  // (node, owner) of the entry's owners
  std::set<std::pair<int64_t, int>> by_sent_;  // (bytes sent, owner), built on first need
  bool by_sent_valid_ = false;
};

}  // namespace

BsrScheme plan_bsr(const BsrTable& table, const Topology* topology, BsrPolicy policy) {
  BsrScheme scheme;
  const auto& entries = table.entries();
  int devices = topology ? topology->num_devices() : 0;
  for (const BsrEntry& e : entries) {
    if (!e.owners().empty()) devices = std::max(devices, e.owners().back() + 1);
    if (!e.receivers().empty()) devices = std::max(devices, e.receivers().back() + 1);
  }
  SenderChooser chooser(topology, devices);
  for (int i = 0; i < static_cast<int>(entries.size()); ++i) {
    const BsrEntry& e = entries[i];
    bool started = false;
    for (int r : e.receivers()) {
      int sender = e.owners().front();
      if (std::binary_search(e.owners().begin(), e.owners().end(), r)) {
        sender = r;  // (i) owned: local copy, whatever the policy (no scheme sends what is there)
      } else if (policy == BsrPolicy::kHeuristic) {
        if (!started) chooser.start(e.owners());
        started = true;
        sender = chooser.choose(r);  // (ii), then (iii)
      }
      if (sender != r) chooser.add_sent(sender, e.bytes());
      scheme.transfers.push_back({i, sender, r});
    }
  }
  scheme.bytes_sent = chooser.bytes_sent();
  return scheme;
}

std::map<std::pair<int, int>, int64_t> BsrScheme::pair_bytes(const BsrTable& table) const {
  std::map<std::pair<int, int>, int64_t> out;
  for (const BsrTransfer& t : transfers) {
    if (t.sender != t.receiver) out[{t.sender, t.receiver}] += table.entries()[t.entry].bytes();
  }
  return out;
}

DeviceOps BsrScheme::device_ops(const BsrTable& table) const {
  // One op per (sender, receiver) pair (a local copy when they are equal), found through a hash of
  // the pair: a switch of 1,024 ranks has hundreds of thousands of transfers, and a tree of pairs
  // per op kind cost a logarithm and a node per lookup. Each op's pieces are counted first, so
  // every piece list is allocated once.
  struct Pair {
    int sender = 0;
    int receiver = 0;
    size_t pieces = 0;
  };
  std::vector<Pair> pairs;
  std::unordered_map<uint64_t, int> pair_index;
  std::vector<int> pair_of(transfers.size());
  for (size_t i = 0; i < transfers.size(); ++i) {
    const BsrTransfer& t = transfers[i];
    const uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(t.sender)) << 32 | static_cast<uint32_t>(t.receiver);
    const auto [it, fresh] = pair_index.emplace(key, static_cast<int>(pairs.size()));
    if (fresh) pairs.push_back({t.sender, t.receiver, 0});
    ++pairs[it->second].pieces;
    pair_of[i] = it->second;
  }
  std::vector<CommOp> sends(pairs.size()), recvs(pairs.size());  // a local copy is its pair's "send"
  for (size_t p = 0; p < pairs.size(); ++p) {
    const Pair& pair = pairs[p];
    if (pair.sender == pair.receiver) {
      sends[p].kind = CommKind::kLocalCopy;
    } else {
      sends[p].kind = CommKind::kSend;
      sends[p].peer = pair.receiver;
      recvs[p].kind = CommKind::kRecv;
      recvs[p].peer = pair.sender;
      recvs[p].pieces.reserve(pair.pieces);
    }
    sends[p].pieces.reserve(pair.pieces);
  }
  for (size_t i = 0; i < transfers.size(); ++i) {
    const BsrEntry& e = table.entries()[transfers[i].entry];
    CommOp& op = sends[pair_of[i]];
    op.pieces.push_back({e.tensor, e.slice()});
    if (op.kind == CommKind::kLocalCopy) continue;
    op.bytes += e.bytes();
    recvs[pair_of[i]].pieces.push_back({e.tensor, e.slice()});
  }
  // Per device: its local copy, then its sends by ascending peer, then its receives by ascending peer.
  std::vector<int> order(pairs.size());
  std::iota(order.begin(), order.end(), 0);
  DeviceOps ops;
  for (int p : order) {
    if (sends[p].kind == CommKind::kLocalCopy) ops[pairs[p].sender].push_back(std::move(sends[p]));
  }
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return std::tie(pairs[a].sender, pairs[a].receiver) < std::tie(pairs[b].sender, pairs[b].receiver);
  });
  for (int p : order) {
    if (sends[p].kind == CommKind::kSend) ops[pairs[p].sender].push_back(std::move(sends[p]));
  }
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return std::tie(pairs[a].receiver, pairs[a].sender) < std::tie(pairs[b].receiver, pairs[b].sender);
  });
  for (int p : order) {
    if (recvs[p].kind == CommKind::kRecv) ops[pairs[p].receiver].push_back(std::move(recvs[p]));
  }
  return ops;
}

}  // namespace hspmd::resolve
