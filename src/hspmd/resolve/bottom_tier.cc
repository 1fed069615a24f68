#include "hspmd/resolve/bottom_tier.h"

#include "hspmd/core/error.h"

namespace hspmd::resolve {

using sharding::DistState;
using sharding::kDuplicate;
using sharding::kPartial;

namespace {

bool same_ds(const DistState& a, const DistState& b) { return a.with_zero(false) == b.with_zero(false); }

// dst's entries with each duplicate entry cut into digits of src's degrees where they line up:
// (D:4) against (P:2,D:2) reads (D:2,D:2), the same device -> coordinate map (canonical forms merge
// adjacent duplicates; a gradient partial over CP and duplicated over TP goes to (D:4)).
std::vector<DistState::Entry> aligned_with(const std::vector<DistState::Entry>& dst,
                                           const std::vector<DistState::Entry>& src) {
  std::vector<DistState::Entry> out;
  size_t k = 0;
  for (DistState::Entry e : dst) {
    while (e.dim == kDuplicate && k < src.size() && e.degree > src[k].degree && e.degree % src[k].degree == 0) {
      out.push_back({kDuplicate, src[k].degree});
      e.degree /= src[k++].degree;
    }
    out.push_back(e);
    ++k;
  }
  return out;
}

// The one position where src and dst differ in dim only, or -1.
int changed_position(const DistState& src, const DistState& dst) {
  const auto& a = src.entries();
  const std::vector<DistState::Entry> b = aligned_with(dst.entries(), a);
  if (a.size() != b.size()) return -1;
  int pos = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].degree != b[i].degree) return -1;
    if (a[i].dim == b[i].dim) continue;
    if (pos >= 0) return -1;
    pos = static_cast<int>(i);
  }
  if (pos < 0) return -1;
  for (const auto& e : a) {
    if (e.dim == b[pos].dim && e.dim != kDuplicate) return -1;  // a split dim used twice
  }
  return pos;
}

// Precondition of the four collective rules: same DG and exactly position changes from -> to.
bool changes(const GroupReshard& r, bool (*from)(int), bool (*to)(int)) {
  if (r.src_group != r.dst_group) return false;
  const int p = changed_position(r.src_ds, r.dst_ds);
  return p >= 0 && from(r.src_ds.entries()[p].dim) && to(aligned_with(r.dst_ds.entries(), r.src_ds.entries())[p].dim);
}

bool is_partial(int d) { return d == kPartial; }
bool is_dup(int d) { return d == kDuplicate; }
bool is_split(int d) { return d >= 0; }

// For each index i of `group`, the members of its collective: the ranks at the indices that share
// every coordinate but position p with i, by coordinate at p. One list per collective, shared by
// its members (each computed once, so this is linear in the group, not group x members).
std::vector<CommGroup> member_lists(const DistState& ds, int p, const sharding::DeviceGroup& group) {
  const auto& e = ds.entries();
  int stride = 1;
  for (size_t k = p + 1; k < e.size(); ++k) stride *= e[k].degree;
  const int n = e[p].degree;
  std::vector<CommGroup> out(group.size());
  for (int i = 0; i < group.size(); ++i) {
    const int base = i - ((i / stride) % n) * stride;
    if (base != i) {
      out[i] = out[base];  // the base (coordinate 0 at p) comes first
      continue;
    }
    std::vector<int> ranks;
    for (int c = 0; c < n; ++c) ranks.push_back(group[base + c * stride]);
    out[i] = CommGroup(std::move(ranks));
  }
  return out;
}

// Ring-model bytes a member sends: AR 2(n-1)/n, RS and AG (n-1)/n of the full region.
int64_t ring_bytes(int64_t full_bytes, int n, bool all_reduce) {
  return full_bytes * (n - 1) / n * (all_reduce ? 2 : 1);
}

void lower_collective(const GroupReshard& r, DeviceOps& ops, CommKind kind) {
  const int p = changed_position(r.src_ds, r.dst_ds);
  const int n = r.src_ds.entries()[p].degree;
  const std::vector<CommGroup> groups = member_lists(r.src_ds, p, r.src_group);
  int dim = -1;
  if (kind != CommKind::kAllReduce) {
    dim = kind == CommKind::kAllGather ? r.src_ds.entries()[p].dim
                                       : aligned_with(r.dst_ds.entries(), r.src_ds.entries())[p].dim;
  }
  for (int i = 0; i < r.src_group.size(); ++i) {
    CommOp op;
    op.kind = kind;
    op.group = groups[i];
    // The region the collective covers is the larger of the two shards (the unsplit one).
    const Region full = kind == CommKind::kAllGather ? r.dst_ds.region(i, r.part) : r.src_ds.region(i, r.part);
    op.dim = dim;
    op.pieces.push_back({0, full});
    op.bytes = ring_bytes(full.numel() * r.element_size, n, kind == CommKind::kAllReduce);
    ops[r.src_group[i]].push_back(std::move(op));
  }
}

void lower_identity(const GroupReshard& r, DeviceOps& ops) {
  for (int i = 0; i < r.src_group.size(); ++i) {
    ops[r.src_group[i]].push_back({CommKind::kIdentity, {{0, r.src_ds.region(i, r.part)}}, {}, -1, -1, 0});
  }
}

void lower_sr(const GroupReshard& r, DeviceOps& ops) {
  for (int i = 0; i < r.src_group.size(); ++i) {
    const Region region = r.src_ds.region(i, r.part);
    const int from = r.src_group[i], to = r.dst_group[i];
    if (from == to) {
      ops[from].push_back({CommKind::kIdentity, {{0, region}}, {}, -1, -1, 0});
      continue;
    }
    ops[from].push_back({CommKind::kSend, {{0, region}}, {}, to, -1, region.numel() * r.element_size});
    ops[to].push_back({CommKind::kRecv, {{0, region}}, {}, from, -1, 0});
  }
}

void lower_slice(const GroupReshard& r, DeviceOps& ops) {
  for (int i = 0; i < r.dst_group.size(); ++i) {
    ops[r.dst_group[i]].push_back({CommKind::kLocalCopy, {{0, r.dst_ds.region(i, r.part)}}, {}, -1, -1, 0});
  }
}

const std::vector<BottomRule> kRules = {
    {ReshardKind::kIdentity, "same DS, same DG",
     [](const GroupReshard& r) { return same_ds(r.src_ds, r.dst_ds) && r.src_group == r.dst_group; }, lower_identity},
    {ReshardKind::kSR, "same DS, DG differs",
     [](const GroupReshard& r) { return same_ds(r.src_ds, r.dst_ds) && r.src_group != r.dst_group; }, lower_sr},
    {ReshardKind::kAR, "same DG, one position P:n -> D:n",
     [](const GroupReshard& r) { return changes(r, is_partial, is_dup); },
     [](const GroupReshard& r, DeviceOps& ops) { lower_collective(r, ops, CommKind::kAllReduce); }},
    {ReshardKind::kRS, "same DG, one position P:n -> Sd:n",
     [](const GroupReshard& r) { return changes(r, is_partial, is_split); },
     [](const GroupReshard& r, DeviceOps& ops) { lower_collective(r, ops, CommKind::kReduceScatter); }},
    {ReshardKind::kAG, "same DG, one position Sd:n -> D:n",
     [](const GroupReshard& r) { return changes(r, is_split, is_dup); },
     [](const GroupReshard& r, DeviceOps& ops) { lower_collective(r, ops, CommKind::kAllGather); }},
    {ReshardKind::kSlice, "same DG, one position D:n -> Sd:n",
     [](const GroupReshard& r) { return changes(r, is_dup, is_split); }, lower_slice},
};

}  // namespace

const std::vector<BottomRule>& bottom_tier_rules() { return kRules; }

const BottomRule* match_bottom_rule(const GroupReshard& r) {
  for (const BottomRule& rule : kRules) {
    if (rule.applies(r)) return &rule;
  }
  return nullptr;
}

}  // namespace hspmd::resolve
