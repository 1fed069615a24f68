// The output of communication resolution: per device, a list of concrete comm ops that the
// runtime executes as-is. Every rank computes the same lists from the same plan (resolution is a
// pure function of the annotations), so peers agree on groups, slices and order without talking.
//
//   Reshard of W [8, 4] from (S0:2) to (D:2) on group [0-1] resolves to, on device 0:
//     AllGather group=[0-1] dim=0 [0:8, 0:4] bytes=64      (device 0 holds [0:4, 0:4], part 0)
//   A BSR moves finest slices point to point:
//     Send peer=5 [0:4, 0:4] bytes=64   /   Recv peer=1 [4:8, 0:4]   /   LocalCopy [0:2, 0:4]
//
// Regions are in global tensor coordinates. `bytes` is what this device puts on the wire for the
// op: p2p = the payload; collectives use the ring model (AR 2(n-1)/n, RS and AG (n-1)/n of the
// full region), local ops 0.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "hspmd/resolve/comm_group.h"
#include "hspmd/sharding/region.h"

namespace hspmd::resolve {

using sharding::Region;

enum class CommKind {
  kIdentity,       // the local shard is already the destination shard
  kLocalCopy,      // copy pieces of the local source shard into the local destination shard
  kSend,           // send pieces to `peer`
  kRecv,           // receive pieces from `peer`
  kAllReduce,      // sum `region` over `group`
  kReduceScatter,  // sum `region` over `group`; member j keeps part j along `dim`
  kAllGather,      // member j holds part j of `region` along `dim`; all get the whole region
  kZeroFill,       // the pieces of the destination shard are zeros: a summand this device does not
                   // hold (a sum moved to devices that split it into more summands)
};
std::string_view comm_kind_name(CommKind kind);

// How a Reshard (or one subgroup of it) was resolved: the vocabulary of the paper's Figure 7.
enum class ReshardKind {
  kIdentity,    // same DS, same DG
  kSR,          // same DS, DG changed: each device sends its shard to its counterpart
  kAR,          // bottom tier partial -> duplicate
  kRS,          // bottom tier partial -> split
  kAG,          // bottom tier split -> duplicate
  kSlice,       // bottom tier duplicate -> split: local, no communication
  kBSR,         // batched send-receive (§5.3)
  kSplitAR,     // top tier partial -> duplicate, per finest slice
  kSplitRS,     // top tier partial -> split, per finest slice
  kSplitAG,     // top tier split -> duplicate, per finest slice
  kSplitSlice,  // top tier duplicate -> split: local, no communication
};
std::string_view reshard_kind_name(ReshardKind kind);

// A piece of one tensor; `tensor` indexes the tensors of a fused BSR (0 otherwise).
struct Piece {
  int tensor = 0;
  Region region;
  friend bool operator==(const Piece&, const Piece&) = default;
};

struct CommOp {
  CommKind kind = CommKind::kIdentity;
  std::vector<Piece> pieces;  // p2p/local: the pieces moved; collectives: one, the full region
  CommGroup group;            // collectives: members in order, shared by the members' ops
  int peer = -1;              // kSend/kRecv
  int dim = -1;               // kReduceScatter/kAllGather
  int64_t bytes = 0;          // bytes this device sends for the op
  // kAllReduce: this member adds zeros instead of its shard (it holds a duplicate of another
  // member's summand) and still receives the sum. Each member keeps the part of `region` its
  // destination shard covers (all of it, unless the reshard splits the result).
  bool zero_input = false;

  std::string to_string() const;
  void append_text(std::string& out) const;  // to_string() appended to `out`
  friend bool operator==(const CommOp&, const CommOp&) = default;
};

// device -> its ops, in execution order.
using DeviceOps = std::map<int, std::vector<CommOp>>;

}  // namespace hspmd::resolve
