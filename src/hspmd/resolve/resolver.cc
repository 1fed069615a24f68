#include "hspmd/resolve/resolver.h"

#include <optional>
#include <set>
#include <sstream>

#include "hspmd/core/error.h"
#include "hspmd/resolve/bottom_tier.h"
#include "hspmd/resolve/bsr_table.h"
#include "hspmd/resolve/top_tier.h"

namespace hspmd::resolve {

using sharding::Annotation;
using sharding::DistState;

std::string_view tier_name(Tier tier) {
  switch (tier) {
    case Tier::kBottom: return "bottom";
    case Tier::kTop: return "top";
    case Tier::kBottomThenTop: return "bottom+top";
    case Tier::kBsr: return "BSR";
  }
  return "?";
}

std::string Resolution::classification() const {
  if (tier == Tier::kBsr) return "BSR";
  std::ostringstream out;
  for (size_t s = 0; s < steps.size(); ++s) {
    out << (s ? "+" : "") << (steps[s].top_tier ? "top[" : "bottom[");
    for (size_t k = 0; k < steps[s].kinds.size(); ++k) out << (k ? "," : "") << reshard_kind_name(steps[s].kinds[k]);
    out << "]";
  }
  return out.str();
}

std::vector<CommOp> Resolution::ops_of(int device) const {
  std::vector<CommOp> out;
  for (const ResolveStep& s : steps) {
    auto it = s.ops.find(device);
    if (it != s.ops.end()) out.insert(out.end(), it->second.begin(), it->second.end());
  }
  return out;
}

int64_t Resolution::bytes_sent(int device) const {
  int64_t n = 0;
  for (const CommOp& op : ops_of(device)) n += op.bytes;
  return n;
}

std::vector<int> Resolution::devices() const {
  std::set<int> out;
  for (const ResolveStep& s : steps) {
    for (const auto& [dev, ops] : s.ops) out.insert(dev);
  }
  return {out.begin(), out.end()};
}

namespace {

std::vector<DistState> without_zero(const std::vector<DistState>& states) {
  std::vector<DistState> out;
  for (const DistState& ds : states) out.push_back(ds.with_zero(false));
  return out;
}

[[noreturn]] void partial_to_bsr(const Annotation& src, const Annotation& dst, const std::string& tensor,
                                 const std::string& why) {
  HSPMD_THROW() << "tensor " << tensor << ": Reshard " << src.to_string() << " -> " << dst.to_string()
                << " needs a BSR (" << why << ") but Partial never goes to BSR; reduce it with a collective first";
}

ResolveStep bsr_step(const Annotation& src, const Annotation& dst, const Shape& shape, const std::string& tensor,
                     const ResolveOptions& o) {
  BsrTable table;
  table.add(tensor, src, dst, shape, o.element_size);
  ResolveStep step{src, dst, false, {ReshardKind::kBSR}, {}};
  step.ops = plan_bsr(table, o.topology, o.bsr_policy).device_ops(table);
  return step;
}

GroupReshard group_reshard(const Annotation& src, const Annotation& dst, int g, const Shape& shape,
                           const ResolveOptions& o) {
  return {src.group(g), src.ds(g), dst.group(g), dst.ds(g), src.group_part(g, shape), o.element_size};
}

// A subgroup's BSR, summand by summand (a partial top tier is fine: each subgroup moves its own
// summand). Destination summand c is the source's summand c, moved among the devices with partial
// coordinate c on each side (a tied head's gradient, partial over the CP ranks of the last stage,
// going to the first stage's CP ranks), or zeros where the source has fewer summands: a source of
// one summand (reduced first, if need be) going to a destination that splits it into several.
// The source holds as many summands as the destination, or one.
void bsr_by_summand(const GroupReshard& r, const std::string& tensor, const ResolveOptions& o, DeviceOps& ops) {
  const int held = r.src_ds.degree(sharding::kPartial);
  for (int c = 0; c < r.dst_ds.degree(sharding::kPartial); ++c) {
    BsrTable::DeviceRegions from, to;
    for (int i = 0; i < r.src_group.size(); ++i) {
      if (r.src_ds.coord(i, sharding::kPartial) == c) from.emplace_back(r.src_group[i], r.src_ds.region(i, r.part));
    }
    for (int i = 0; i < r.dst_group.size(); ++i) {
      if (r.dst_ds.coord(i, sharding::kPartial) == c) to.emplace_back(r.dst_group[i], r.dst_ds.region(i, r.part));
    }
    if (c >= held) {
      for (const auto& [dev, region] : to) ops[dev].push_back({CommKind::kZeroFill, {{0, region}}, {}, -1, -1, 0});
      continue;
    }
    BsrTable table;  // one tensor per table: the executor runs one tensor's pieces per Reshard
    table.add_regions(tensor, from, to, o.element_size);
    for (auto& [dev, dev_ops] : plan_bsr(table, o.topology, o.bsr_policy).device_ops(table)) {
      auto& list = ops[dev];
      list.insert(list.end(), dev_ops.begin(), dev_ops.end());
    }
  }
}

// The bottom tier of src -> dst (same hsize and hdim). With collectives_only, returns false
// instead of using a BSR for a subgroup.
bool bottom_step(const Annotation& src, const Annotation& dst, const Shape& shape, const std::string& tensor,
                 const ResolveOptions& o, bool collectives_only, ResolveStep& step) {
  step = {src, dst, false, {}, {}};
  for (int g = 0; g < src.hsize(); ++g) {
    const GroupReshard r = group_reshard(src, dst, g, shape, o);
    if (const BottomRule* rule = match_bottom_rule(r)) {
      rule->lower(r, step.ops);
      step.kinds.push_back(rule->kind);
      continue;
    }
    if (collectives_only) return false;
    const int summands = r.src_ds.degree(sharding::kPartial);
    if (summands != 1 && summands != r.dst_ds.degree(sharding::kPartial)) {
      partial_to_bsr(src, dst, tensor,
                     "subgroup " + std::to_string(g) + ": " + r.src_group.to_string() + r.src_ds.to_string() + " -> " +
                         r.dst_group.to_string() + r.dst_ds.to_string() +
                         " matches no bottom-tier collective and the summand counts differ");
    }
    bsr_by_summand(r, tensor, o, step.ops);
    step.kinds.push_back(ReshardKind::kBSR);
  }
  return true;
}

// Whether `a` shards `shape` evenly: what Annotation::validate_for checks, as a question, for
// the intermediate layouts the resolver tries (a no is a path not taken, not an error).
bool fits(const Annotation& a, const Shape& shape) {
  if (a.hdim() >= 0 && (a.hdim() >= shape.rank() || shape.dim(a.hdim()) % a.hsize() != 0)) return false;
  for (int g = 0; g < a.hsize(); ++g) {
    const Region part = a.group_part(g, shape);
    for (const DistState::Entry& e : a.ds(g).entries()) {
      if (e.dim >= 0 && (e.dim >= part.rank() || part.extent(e.dim) % e.degree != 0)) return false;
    }
  }
  return true;
}

// src with every bottom-tier position that goes from D:n to Sd:n in dst already sliced (a local
// step), or nullopt when there is none or the result would split a dim twice or not fit `shape`.
// A partial source that must also be sliced (a gradient partial over CP ranks and duplicated over
// TP, going to a TP-split optimizer state: (P:2,D:2) -> (D:2,S0:2)) matches no single collective;
// slicing first leaves one reduction, over less data.
std::optional<Annotation> sliced_first(const Annotation& src, const Annotation& dst, const Shape& shape) {
  std::vector<DistState> mid;
  bool changed = false;
  for (int g = 0; g < src.hsize(); ++g) {
    const auto& se = src.ds(g).entries();
    const auto& de = dst.ds(g).entries();
    std::vector<DistState::Entry> entries = se;
    if (src.group(g) == dst.group(g) && se.size() == de.size()) {
      for (size_t i = 0; i < se.size(); ++i) {
        if (se[i].dim == sharding::kDuplicate && de[i].dim >= 0 && se[i].degree == de[i].degree) {
          if (src.ds(g).degree(de[i].dim) > 1) return std::nullopt;  // dim already split here
          entries[i].dim = de[i].dim;
          changed = true;
        }
      }
    }
    mid.push_back(DistState::make(std::move(entries)));
  }
  if (!changed) return std::nullopt;
  Annotation out = src.with_ds_union(std::move(mid));
  if (!fits(out, shape)) return std::nullopt;
  return out;
}

// src with its partial position reduced everywhere (P:n -> D:n, merged with a duplicate position
// next to it: (P:2,D:2) -> (D:4)), or nullopt when src has no partial position or the result would
// name D twice. The last resort of a partial source: all-reduce, then a local slice or another
// collective, e.g. a CP x TP norm weight's gradient going to its ZeRO-1 state: (P:2,D:2) -> (S0:4).
std::optional<Annotation> reduced_first(const Annotation& src) {
  std::vector<DistState> mid;
  for (int g = 0; g < src.hsize(); ++g) {
    std::vector<DistState::Entry> entries;
    for (DistState::Entry e : src.ds(g).entries()) {
      if (e.dim == sharding::kPartial) e.dim = sharding::kDuplicate;
      if (e.dim == sharding::kDuplicate && !entries.empty() && entries.back().dim == sharding::kDuplicate) {
        entries.back().degree *= e.degree;
        continue;
      }
      entries.push_back(e);
    }
    int duplicates = 0;
    for (const DistState::Entry& e : entries) duplicates += e.dim == sharding::kDuplicate ? 1 : 0;
    if (duplicates > 1) return std::nullopt;
    mid.push_back(DistState::make(std::move(entries)));
  }
  return src.with_ds_union(std::move(mid));
}

// The bottom tier of src -> dst (same hsize and hdim) by collectives only: one step when each
// subgroup's change is one collective; two when a partial source must also be split (slice
// locally, then reduce; or else reduce, then slice); nullopt when none applies.
std::optional<std::vector<ResolveStep>> bottom_collectives(const Annotation& src, const Annotation& dst,
                                                           const Shape& shape, const std::string& tensor,
                                                           const ResolveOptions& o) {
  std::vector<ResolveStep> steps(1);
  if (bottom_step(src, dst, shape, tensor, o, true, steps[0])) return steps;
  if (!src.has_partial()) return std::nullopt;
  steps.resize(2);
  for (const std::optional<Annotation>& mid : {sliced_first(src, dst, shape), reduced_first(src)}) {
    if (mid && bottom_step(src, *mid, shape, tensor, o, true, steps[0]) &&
        bottom_step(*mid, dst, shape, tensor, o, true, steps[1])) {
      return steps;
    }
  }
  return std::nullopt;
}

// A partial source whose subgroup matches no collective and holds another number of summands than
// the destination's: each subgroup reduces its summands by a collective first, then a BSR of each
// subgroup moves the sums (into summand 0 where the destination is partial, zeros in the others),
// e.g. a tied head's gradient, partial over the CP 2 ranks of a pipeline's last stage, going to a
// first stage without CP (or with CP 4). nullopt when src -> dst is not such a Reshard or no
// collective reduces src.
std::optional<std::vector<ResolveStep>> reduced_then_moved(const Annotation& src, const Annotation& dst,
                                                           const Shape& shape, const std::string& tensor,
                                                           const ResolveOptions& o) {
  bool differs = false;
  for (int g = 0; g < src.hsize(); ++g) {
    const int held = src.ds(g).degree(sharding::kPartial);
    differs = differs || (held > 1 && held != dst.ds(g).degree(sharding::kPartial) &&
                      !match_bottom_rule(group_reshard(src, dst, g, shape, o)));
  }
  const std::optional<Annotation> mid = reduced_first(src);
  if (!differs || !mid || !fits(*mid, shape)) return std::nullopt;
  std::vector<ResolveStep> steps(2);
  if (!bottom_step(src, *mid, shape, tensor, o, true, steps[0])) return std::nullopt;
  bottom_step(*mid, dst, shape, tensor, o, false, steps[1]);
  return steps;
}

bool top_step(const Annotation& src, const Annotation& dst, const Shape& shape, const ResolveOptions& o,
              ResolveStep& step) {
  const TopReshard r{src, dst, shape, o.element_size};
  const TopRule* rule = match_top_rule(r);
  if (!rule) return false;
  step = {src, dst, true, {rule->kind}, {}};
  rule->lower(r, step.ops);
  return true;
}

}  // namespace

Resolution resolve(const Annotation& src, const Annotation& dst, const Shape& shape, const std::string& tensor,
                   const ResolveOptions& o) {
  src.validate_for(shape, tensor);
  dst.validate_for(shape, tensor);
  Resolution res;
  if (src.hsize() == dst.hsize() && src.hdim() == dst.hdim()) {
    res.tier = Tier::kBottom;
    if (src.has_partial()) {
      if (auto steps = bottom_collectives(src, dst, shape, tensor, o)) {
        res.steps = std::move(*steps);
        return res;
      }
      if (auto steps = reduced_then_moved(src, dst, shape, tensor, o)) {
        res.steps = std::move(*steps);
        return res;
      }
    }
    res.steps.emplace_back();
    bottom_step(src, dst, shape, tensor, o, false, res.steps.back());
    return res;
  }
  if (src.hsize() == dst.hsize() && src.dg_union() == dst.dg_union()) {
    ResolveStep top;
    if (without_zero(src.ds_union()) == without_zero(dst.ds_union())) {
      if (top_step(src, dst, shape, o, top)) {
        res.tier = Tier::kTop;
        res.steps.push_back(std::move(top));
        return res;
      }
    } else {
      // §5.2 II: align the DS union inside each subgroup first (the bottom tier: a collective per
      // subgroup, or a local slice then one, e.g. a CP x TP subgroup's (P:2,D:2) -> (D:2,S0:2)
      // beside a one-rank replica), then the hdim across subgroups (the top tier).
      const Annotation mid = src.with_ds_union(dst.ds_union());
      if (fits(mid, shape)) {
        if (auto bottom = bottom_collectives(src, mid, shape, tensor, o); bottom && top_step(mid, dst, shape, o, top)) {
          res.tier = Tier::kBottomThenTop;
          res.steps = std::move(*bottom);
          res.steps.push_back(std::move(top));
          return res;
        }
      }
    }
  }
  if (src.has_partial() || dst.has_partial()) {
    partial_to_bsr(src, dst, tensor, src.hsize() != dst.hsize()       ? "hsize changes"
                                     : src.dg_union() != dst.dg_union() ? "hdim and dg_union change"
                                                                        : "no top-tier collective applies");
  }
  res.tier = Tier::kBsr;
  res.steps.push_back(bsr_step(src, dst, shape, tensor, o));
  return res;
}

size_t ResolveCache::KeyHash::operator()(const Key& k) const {
  size_t h = k.src.hash() * 31 + k.dst.hash();
  for (int64_t d : k.dims) h = h * 1099511628211ull + static_cast<size_t>(d);
  return h;
}

const Resolution& ResolveCache::resolve(const Annotation& src, const Annotation& dst, const Shape& shape,
                                        const std::string& tensor) {
  Key key{src, dst, shape.dims()};
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  return cache_.emplace(std::move(key), resolve::resolve(src, dst, shape, tensor, options_)).first->second;
}

size_t ResolveCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cache_.size();
}

}  // namespace hspmd::resolve
