#include "hspmd/resolve/fused_bsr.h"

#include <unordered_map>

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

// Adds one table's scheme to `out`: ops appended per device, and its messages, which are its sends
// (device_ops lists them by sender, then receiver).
void append_scheme(const BsrTable& table, const BsrScheme& scheme, int tensor_offset, FusedBsr& out) {
  for (auto& [dev, ops] : scheme.device_ops(table)) {
    std::vector<CommOp>& into = out.ops[dev];
    for (CommOp& op : ops) {
      if (op.kind == CommKind::kSend) {
        out.message_list.push_back({dev, op.peer, op.bytes, static_cast<int>(op.pieces.size())});
        out.bytes_sent[dev] += op.bytes;
      }
      if (tensor_offset != 0) {
        for (Piece& p : op.pieces) p.tensor += tensor_offset;
      }
      into.push_back(std::move(op));
    }
  }
}

// Tensors resharded alike: same annotations, shape and element size, whatever their names.
struct SameLayout {
  bool operator()(const FusedTensor* a, const FusedTensor* b) const {
    return a->element_size == b->element_size && a->shape == b->shape && a->src == b->src && a->dst == b->dst;
  }
};
struct LayoutHash {
  size_t operator()(const FusedTensor* t) const {
    size_t h = t->src.hash() * 0x100000001b3ull ^ t->dst.hash();
    for (int64_t d : t->shape.dims()) h = h * 0x100000001b3ull ^ static_cast<size_t>(d);
    return h * 0x100000001b3ull ^ static_cast<size_t>(t->element_size);
  }
};

}  // namespace

FusedBsr plan_fused_bsr(const std::vector<FusedTensor>& tensors, const Topology* topology,
                        const FusedBsrOptions& options) {
  FusedBsr out;
  // Each layout is validated and sliced once, by its first tensor; the others copy its entries.
  std::unordered_map<const FusedTensor*, int, LayoutHash, SameLayout> first_with_layout;
  for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
    const FusedTensor& t = tensors[i];
    const auto [first, fresh] = first_with_layout.emplace(&t, i);
    if (!fresh) {
      out.table.add_copy(t.name, out.table, first->second);
      continue;
    }
    t.src.validate_for(t.shape, t.name);
    t.dst.validate_for(t.shape, t.name);
    out.table.add(t.name, t.src, t.dst, t.shape, t.element_size, options.dead);
  }
  if (options.fuse) {
    append_scheme(out.table, plan_bsr(out.table, topology, options.policy), 0, out);
    return out;
  }
  for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
    BsrTable single;
    single.add_copy(tensors[i].name, out.table, i);
    append_scheme(single, plan_bsr(single, topology, options.policy), i, out);
  }
  return out;
}

}  // namespace hspmd::resolve
