#include "hspmd/resolve/comm_op.h"

#include <sstream>

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

std::string CommOp::to_string() const {
  std::ostringstream out;
  out << comm_kind_name(kind);
  if (!group.empty()) {
    out << " group=[";
    for (size_t i = 0; i < group.size(); ++i) out << (i ? "," : "") << group[i];
    out << "]";
  }
  if (peer >= 0) out << " peer=" << peer;
  if (dim >= 0) out << " dim=" << dim;
  if (zero_input) out << " zero-input";
  for (const Piece& p : pieces) {
    out << " ";
    if (p.tensor != 0) out << "t" << p.tensor << ":";
    out << p.region.to_string();
  }
  out << " bytes=" << bytes;
  return out.str();
}

}  // namespace hspmd::resolve
