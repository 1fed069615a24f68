#include "hspmd/resolve/top_tier.h"

#include <algorithm>

#include "hspmd/core/error.h"

namespace hspmd::resolve {

using sharding::Annotation;
using sharding::DistState;
using sharding::kDuplicate;
using sharding::kPartial;

namespace {

bool no_ds_splits(const Annotation& a, int d) {
  for (const DistState& ds : a.ds_union()) {
    if (ds.degree(d) > 1) return false;
  }
  return true;
}

// One collective of a top-tier reshard: a finest slice and its holders, one per subgroup.
struct SliceGroup {
  Region slice;
  std::vector<int> members;
};

// Finest slices of the hdim = -1 layout (every subgroup shards the whole tensor) and, per slice,
// the collectives across subgroups; empty when some slice has unequal holder counts.
std::vector<SliceGroup> slice_groups(const TopReshard& r, bool& ok) {
  const Annotation layout = r.src.with_hdim(kDuplicate);
  const int rank = r.shape.rank();
  std::vector<std::vector<int64_t>> cuts(rank);
  std::vector<std::pair<int, Region>> regions;
  for (int dev : layout.devices()) {
    Region reg = *layout.region(dev, r.shape);
    for (int d = 0; d < rank; ++d) {
      cuts[d].push_back(reg.begin[d]);
      cuts[d].push_back(reg.end[d]);
    }
    regions.emplace_back(dev, std::move(reg));
  }
  for (auto& c : cuts) {
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
  }
  std::vector<SliceGroup> out;
  std::vector<int> idx(rank, 0);
  ok = true;
  while (true) {
    Region s;
    for (int d = 0; d < rank; ++d) {
      s.begin.push_back(cuts[d][idx[d]]);
      s.end.push_back(cuts[d][idx[d] + 1]);
    }
    // Holders per subgroup, ordered by their bottom-tier summand index (then group index), so the
    // j-th holders of all subgroups hold matching summands.
    std::vector<std::vector<std::pair<int, int>>> holders(layout.hsize());
    for (const auto& [dev, reg] : regions) {
      if (!reg.contains(s)) continue;
      auto [g, i] = *layout.locate(dev);
      holders[g].emplace_back(layout.ds(g).coord(i, kPartial), dev);
    }
    for (auto& h : holders) {
      std::stable_sort(h.begin(), h.end(), [](auto& a, auto& b) { return a.first < b.first; });
      ok = ok && h.size() == holders[0].size();
    }
    if (!ok) return {};
    for (size_t j = 0; j < holders[0].size(); ++j) {
      SliceGroup sg{s, {}};
      for (const auto& h : holders) sg.members.push_back(h[j].second);
      out.push_back(std::move(sg));
    }
    int d = rank - 1;
    for (; d >= 0; --d) {
      if (++idx[d] + 1 < static_cast<int>(cuts[d].size())) break;
      idx[d] = 0;
    }
    if (d < 0) break;
  }
  return out;
}

bool collectives_apply(const TopReshard& r, int split_dim) {
  if (split_dim >= 0 && !no_ds_splits(r.src, split_dim)) return false;
  // Summands of one subgroup only pair up with summands of another when both cut alike.
  for (const DistState& ds : r.src.ds_union()) {
    if (ds.degree(kPartial) != r.src.ds(0).degree(kPartial)) return false;
  }
  bool ok = false;
  slice_groups(r, ok);
  return ok;
}

void lower_collectives(const TopReshard& r, DeviceOps& ops, CommKind kind, int dim) {
  bool ok = false;
  const int n = r.src.hsize();
  for (const SliceGroup& sg : slice_groups(r, ok)) {
    const int64_t full = sg.slice.numel() * r.element_size;
    for (int dev : sg.members) {
      CommOp op;
      op.kind = kind;
      op.group = sg.members;
      op.dim = dim;
      op.pieces.push_back({0, sg.slice});
      op.bytes = full * (n - 1) / n * (kind == CommKind::kAllReduce ? 2 : 1);
      ops[dev].push_back(std::move(op));
    }
  }
  HSPMD_ASSERT(ok) << "top-tier lowering without a precondition check";
}

const std::vector<TopRule> kRules = {
    {ReshardKind::kSplitAR, "hdim -2 -> -1, equal holder counts per slice",
     [](const TopReshard& r) { return r.src.hdim() == kPartial && r.dst.hdim() == kDuplicate && collectives_apply(r, -1); },
     [](const TopReshard& r, DeviceOps& ops) { lower_collectives(r, ops, CommKind::kAllReduce, -1); }},
    {ReshardKind::kSplitRS, "hdim -2 -> d, no DS splits d, equal holder counts per slice",
     [](const TopReshard& r) { return r.src.hdim() == kPartial && r.dst.hdim() >= 0 && collectives_apply(r, r.dst.hdim()); },
     [](const TopReshard& r, DeviceOps& ops) { lower_collectives(r, ops, CommKind::kReduceScatter, r.dst.hdim()); }},
    {ReshardKind::kSplitAG, "hdim d -> -1, no DS splits d, equal holder counts per slice",
     [](const TopReshard& r) { return r.src.hdim() >= 0 && r.dst.hdim() == kDuplicate && collectives_apply(r, r.src.hdim()); },
     [](const TopReshard& r, DeviceOps& ops) { lower_collectives(r, ops, CommKind::kAllGather, r.src.hdim()); }},
    {ReshardKind::kSplitSlice, "hdim -1 -> d, no DS splits d",
     [](const TopReshard& r) { return r.src.hdim() == kDuplicate && r.dst.hdim() >= 0 && no_ds_splits(r.src, r.dst.hdim()); },
     [](const TopReshard& r, DeviceOps& ops) {
       for (int dev : r.dst.devices()) {
         ops[dev].push_back({CommKind::kLocalCopy, {{0, *r.dst.region(dev, r.shape)}}, {}, -1, -1, 0});
       }
     }},
};

}  // namespace

const std::vector<TopRule>& top_tier_rules() { return kRules; }

const TopRule* match_top_rule(const TopReshard& r) {
  for (const TopRule& rule : kRules) {
    if (rule.applies(r)) return &rule;
  }
  return nullptr;
}

}  // namespace hspmd::resolve
