#include "hspmd/resolve/fused_bsr.h"

#include "hspmd/core/error.h"

namespace hspmd::resolve {

int64_t FusedBsr::total_bytes() const {
  int64_t n = 0;
  for (const auto& [dev, b] : bytes_sent) n += b;
  return n;
}

std::string bsr_algorithm_name(BsrAlgorithm algorithm) {
  switch (algorithm) {
    case BsrAlgorithm::kFusedHeuristic: return "fused";
    case BsrAlgorithm::kPerTensorHeuristic: return "per-tensor";
    case BsrAlgorithm::kPerTensorLowestOwner: return "per-tensor-lowest-owner";
  }
  HSPMD_ASSERT(false) << "unknown BsrAlgorithm " << static_cast<int>(algorithm);
  return "";
}

BsrAlgorithm parse_bsr_algorithm(const std::string& text) {
  for (BsrAlgorithm a :
       {BsrAlgorithm::kFusedHeuristic, BsrAlgorithm::kPerTensorHeuristic, BsrAlgorithm::kPerTensorLowestOwner}) {
    if (bsr_algorithm_name(a) == text) return a;
  }
  HSPMD_THROW() << "unknown BSR algorithm '" << text << "' (fused, per-tensor, per-tensor-lowest-owner)";
}

FusedBsrOptions bsr_algorithm_options(BsrAlgorithm algorithm, std::vector<int> dead) {
  FusedBsrOptions o;
  o.fuse = algorithm == BsrAlgorithm::kFusedHeuristic;
  o.policy = algorithm == BsrAlgorithm::kPerTensorLowestOwner ? BsrPolicy::kLowestOwner : BsrPolicy::kHeuristic;
  o.dead = std::move(dead);
  return o;
}

namespace {

// Adds one table's scheme to `out`: ops appended per device, messages per pair.
void append_scheme(const BsrTable& table, const BsrScheme& scheme, int tensor_offset, FusedBsr& out) {
  for (auto& [dev, ops] : scheme.device_ops(table)) {
    std::vector<CommOp>& into = out.ops[dev];
    for (CommOp& op : ops) {
      for (Piece& p : op.pieces) p.tensor += tensor_offset;
      into.push_back(std::move(op));
    }
  }
  std::map<std::pair<int, int>, int> pieces;
  for (const BsrTransfer& t : scheme.transfers) {
    if (t.sender != t.receiver) ++pieces[{t.sender, t.receiver}];
  }
  for (const auto& [pair, bytes] : scheme.pair_bytes(table)) {
    out.message_list.push_back({pair.first, pair.second, bytes, pieces[pair]});
    out.bytes_sent[pair.first] += bytes;
  }
}

}  // namespace

FusedBsr plan_fused_bsr(const std::vector<FusedTensor>& tensors, const Topology* topology,
                        const FusedBsrOptions& options) {
  FusedBsr out;
  for (const FusedTensor& t : tensors) {
    t.src.validate_for(t.shape, t.name);
    t.dst.validate_for(t.shape, t.name);
    out.table.add(t.name, t.src, t.dst, t.shape, t.element_size, options.dead);
  }
  if (options.fuse) {
    append_scheme(out.table, plan_bsr(out.table, topology, options.policy), 0, out);
    return out;
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const FusedTensor& t = tensors[i];
    BsrTable single;
    single.add(t.name, t.src, t.dst, t.shape, t.element_size, options.dead);
    append_scheme(single, plan_bsr(single, topology, options.policy), static_cast<int>(i), out);
  }
  return out;
}

}  // namespace hspmd::resolve
