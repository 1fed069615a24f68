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

// A finest slice of the hdim = -1 layout (every subgroup shards the whole tensor) and its holders
// in each subgroup, ordered by bottom-tier summand index (then group index), so the j-th holders of
// all subgroups hold matching summands.
struct SliceHolders {
  Region slice;
  std::vector<std::vector<int>> by_group;
  bool equal_counts() const {
    for (const auto& h : by_group) {
      if (h.size() != by_group[0].size()) return false;
    }
    return true;
  }
};

std::vector<SliceHolders> slice_holders(const TopReshard& r) {
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
  std::vector<SliceHolders> out;
  std::vector<int> idx(rank, 0);
  while (true) {
    Region s;
    for (int d = 0; d < rank; ++d) {
      s.begin.push_back(cuts[d][idx[d]]);
      s.end.push_back(cuts[d][idx[d] + 1]);
    }
    std::vector<std::vector<std::pair<int, int>>> holders(layout.hsize());
    for (const auto& [dev, reg] : regions) {
      if (!reg.contains(s)) continue;
      auto [g, i] = *layout.locate(dev);
      holders[g].emplace_back(layout.ds(g).coord(i, kPartial), dev);
    }
    SliceHolders sh{s, {}};
    for (auto& h : holders) {
      std::stable_sort(h.begin(), h.end(), [](auto& a, auto& b) { return a.first < b.first; });
      sh.by_group.emplace_back();
      for (const auto& [summand, dev] : h) sh.by_group.back().push_back(dev);
    }
    out.push_back(std::move(sh));
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
  for (const SliceHolders& sh : slice_holders(r)) {
    if (!sh.equal_counts()) return false;
  }
  return true;
}

// The j-th holders of all subgroups run collective j of each slice.
void lower_collectives(const TopReshard& r, DeviceOps& ops, CommKind kind, int dim) {
  const int n = r.src.hsize();
  for (const SliceHolders& sh : slice_holders(r)) {
    HSPMD_ASSERT(sh.equal_counts()) << "top-tier lowering without a precondition check";
    const int64_t full = sh.slice.numel() * r.element_size;
    for (size_t j = 0; j < sh.by_group[0].size(); ++j) {
      std::vector<int> ranks;
      for (const auto& h : sh.by_group) ranks.push_back(h[j]);
      const CommGroup members(std::move(ranks));
      for (int dev : members) {
        CommOp op;
        op.kind = kind;
        op.group = members;
        op.dim = dim;
        op.pieces.push_back({0, sh.slice});
        op.bytes = full * (n - 1) / n * (kind == CommKind::kAllReduce ? 2 : 1);
        ops[dev].push_back(std::move(op));
      }
    }
  }
}

// Subgroups duplicate a slice different numbers of times (e.g. a TP-2 pipeline's replicated norm
// weight next to a TP-1 pipeline's): one all-reduce per slice over every holder, in which only the
// first holder of each subgroup adds its summand (the others add zeros); each member keeps what
// its destination shard covers, so the same lowering serves SplitAR and SplitRS.
bool uneven_partial_applies(const TopReshard& r, int split_dim) {
  if (split_dim >= 0 && !no_ds_splits(r.src, split_dim)) return false;
  for (const DistState& ds : r.src.ds_union()) {
    if (ds.has_partial()) return false;
  }
  return true;
}

void lower_uneven_partial(const TopReshard& r, DeviceOps& ops) {
  for (const SliceHolders& sh : slice_holders(r)) {
    std::vector<int> ranks;
    for (const auto& h : sh.by_group) ranks.insert(ranks.end(), h.begin(), h.end());
    std::sort(ranks.begin(), ranks.end());
    const CommGroup members(std::move(ranks));
    const int64_t m = static_cast<int64_t>(members.size());
    for (const auto& h : sh.by_group) {
      for (size_t j = 0; j < h.size(); ++j) {
        CommOp op;
        op.kind = CommKind::kAllReduce;
        op.group = members;
        op.zero_input = j > 0;
        op.pieces.push_back({0, sh.slice});
        op.bytes = sh.slice.numel() * r.element_size * 2 * (m - 1) / m;
        ops[h[j]].push_back(std::move(op));
      }
    }
  }
}

const std::vector<TopRule> kRules = {
    {ReshardKind::kSplitAR, "hdim -2 -> -1, equal holder counts per slice",
     [](const TopReshard& r) { return r.src.hdim() == kPartial && r.dst.hdim() == kDuplicate && collectives_apply(r, -1); },
     [](const TopReshard& r, DeviceOps& ops) { lower_collectives(r, ops, CommKind::kAllReduce, -1); }},
    {ReshardKind::kSplitRS, "hdim -2 -> d, no DS splits d, equal holder counts per slice",
     [](const TopReshard& r) { return r.src.hdim() == kPartial && r.dst.hdim() >= 0 && collectives_apply(r, r.dst.hdim()); },
     [](const TopReshard& r, DeviceOps& ops) { lower_collectives(r, ops, CommKind::kReduceScatter, r.dst.hdim()); }},
    {ReshardKind::kSplitAR, "hdim -2 -> -1, no bottom-tier partial (holder counts may differ)",
     [](const TopReshard& r) { return r.src.hdim() == kPartial && r.dst.hdim() == kDuplicate && uneven_partial_applies(r, -1); },
     lower_uneven_partial},
    {ReshardKind::kSplitRS, "hdim -2 -> d, no DS splits d, no bottom-tier partial (holder counts may differ)",
     [](const TopReshard& r) { return r.src.hdim() == kPartial && r.dst.hdim() >= 0 && uneven_partial_applies(r, r.dst.hdim()); },
     lower_uneven_partial},
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
