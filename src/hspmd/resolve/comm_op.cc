#include "hspmd/resolve/comm_op.h"

#include <string>

#include "hspmd/core/append_number.h"
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
  std::string out;
  append_text(out);
  return out;
}

void CommOp::append_text(std::string& out) const {
  out += comm_kind_name(kind);
  if (!group.empty()) {
    out += " group=[";
    sharding::append_runs_text(out, group);
    out += ']';
  }
  if (peer >= 0) {
    out += " peer=";
    append_number(out, peer);
  }
  if (dim >= 0) {
    out += " dim=";
    append_number(out, dim);
  }
  if (zero_input) out += " zero-input";
  for (const Piece& p : pieces) {
    out += ' ';
    if (p.tensor != 0) {
      out += 't';
      append_number(out, p.tensor);
      out += ':';
    }
    p.region.append_text(out);
  }
  out += " bytes=";
  append_number(out, bytes);
}

}  // namespace hspmd::resolve
