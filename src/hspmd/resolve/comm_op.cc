#include "hspmd/resolve/comm_op.h"

#include <string>

#include "hspmd/sharding/int_runs.h"

namespace hspmd::resolve {

std::string_view comm_kind_name(CommKind kind) {
  switch (kind) {
    case CommKind::kIdentity: return "Identity";
    case CommKind::kLocalCopy: return "LocalCopy";
    case CommKind::kSend: return "Send";
    case CommKind::kRecv: return "Recv";
    case CommKind::kAllReduce: return "AllReduce";
    case CommKind::kReduceScatter: return "ReduceScatter";
    case CommKind::kAllGather: return "AllGather";
    case CommKind::kZeroFill: return "ZeroFill";
  }
  return "?";
}

std::string_view reshard_kind_name(ReshardKind kind) {
  switch (kind) {
    case ReshardKind::kIdentity: return "Identity";
    case ReshardKind::kSR: return "SR";
    case ReshardKind::kAR: return "AR";
    case ReshardKind::kRS: return "RS";
    case ReshardKind::kAG: return "AG";
    case ReshardKind::kSlice: return "Slice";
    case ReshardKind::kBSR: return "BSR";
    case ReshardKind::kSplitAR: return "SplitAR";
    case ReshardKind::kSplitRS: return "SplitRS";
    case ReshardKind::kSplitAG: return "SplitAG";
    case ReshardKind::kSplitSlice: return "SplitSlice";
  }
  return "?";
}

// Appended to one string, not streamed: `hspmd explain` of thousands of ranks prints millions of ops,
// and a stream per op (its locale set up each time) was a fifth of the whole report.
std::string CommOp::to_string() const {
  std::string out(comm_kind_name(kind));
  if (!group.empty()) {
    out += " group=[";
    out += sharding::runs_text(group);
    out += ']';
  }
  if (peer >= 0) out += " peer=" + std::to_string(peer);
  if (dim >= 0) out += " dim=" + std::to_string(dim);
  if (zero_input) out += " zero-input";
  for (const Piece& p : pieces) {
    out += ' ';
    if (p.tensor != 0) out += "t" + std::to_string(p.tensor) + ":";
    out += p.region.to_string();
  }
  out += " bytes=" + std::to_string(bytes);
  return out;
}

}  // namespace hspmd::resolve
