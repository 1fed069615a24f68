// Annotation: the full two-tier HSPMD sharding of one tensor (paper §4.2, Figure 6).
//
//   dg_union  one DeviceGroup per sharding subgroup            hsize() == dg_union().size()
//   ds_union  one DistState per subgroup (bottom tier)
//   hdim      top tier across subgroups: kPartial (-2), kDuplicate (-1) or a split dim d >= 0
//
// Layout (what device (g, i) holds, g = subgroup, i = index in its DeviceGroup):
//   hdim == d >= 0: the tensor is cut into hsize equal parts along d and subgroup g takes part g
//                   (parameters; activations take their per-group sizes at run time);
//   hdim == -1:     every subgroup holds the whole tensor; hdim == -2: subgroups hold summands.
//   Inside its subgroup's part, device (g, i) holds ds_union[g].region(i, part).
//
// Example, the weight W of Figure 4 (right): replicated across 2 heterogeneous pipelines, TP 4 in
// the first and TP 2 in the second, column-parallel (split along dim 0):
//   Annotation w = Annotation::make({DeviceGroup::range(0, 4), DeviceGroup::range(4, 6)},
//                                   {DistState::split(0, 4), DistState::split(0, 2)}, kDuplicate);
//   w.to_string() == "dup{[0-3](S0:4);[4-5](S0:2)}"
// Text: "dup{...}", "partial{...}" or "split<d>{...}", then "group(ds)" per subgroup, ';'-separated.
// An hsize-1 annotation is plain SPMD; its hdim is normalized to -1.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hspmd/core/shape.h"
#include "hspmd/sharding/device_group.h"
#include "hspmd/sharding/dist_state.h"
#include "hspmd/sharding/int_runs.h"
#include "hspmd/sharding/region.h"

namespace hspmd::sharding {

class Annotation {
 public:
  Annotation() = default;  // hsize 0: "no annotation"; make() never returns this
  // Throws Error when the unions differ in size (hsize mismatch), a DistState's device count is
  // not its group's size, a device appears in two groups, or hdim < -2.
  static Annotation make(std::vector<DeviceGroup> dg_union, std::vector<DistState> ds_union, int hdim);
  static Annotation spmd(DeviceGroup group, DistState ds);

  int hsize() const { return body_ ? static_cast<int>(body_->dg_union.size()) : 0; }
  int hdim() const { return body_ ? body_->hdim : kDuplicate; }
  const std::vector<DeviceGroup>& dg_union() const;
  const std::vector<DistState>& ds_union() const;
  const DeviceGroup& group(int g) const { return body_->dg_union[g]; }
  const DistState& ds(int g) const { return body_->ds_union[g]; }
  bool is_null() const { return !body_; }

  std::vector<int> devices() const;  // every device, group by group
  // (subgroup, index in subgroup) of a device, or nullopt when it holds nothing. O(log runs) over
  // all subgroups, not a scan of them: explaining or planning thousands of ranks locates each rank
  // in every tensor's annotation.
  std::optional<std::pair<int, int>> locate(int device) const;
  bool has_partial() const;
  // The part of the global tensor that subgroup g shards (see Layout above).
  Region group_part(int g, const Shape& shape) const;
  // What `device` holds, or nullopt when it is not in dg_union.
  std::optional<Region> region(int device, const Shape& shape) const;
  // Throws Error naming `tensor` when the annotation cannot shard `shape` evenly.
  void validate_for(const Shape& shape, const std::string& tensor) const;

  // Same annotation with another hdim / ds_union (validated).
  Annotation with_hdim(int hdim) const;
  Annotation with_ds_union(std::vector<DistState> ds_union) const;
  // The annotation of the optimizer state under ZeRO-1 (DistState::zero()). When hsize > 1 and
  // the tensor is duplicated across subgroups, the state is split across subgroups along the
  // first dim that no DistState splits and hsize divides (so gathering it back is a top-tier
  // SplitAG); otherwise each zero DistState turns its D:n into S<z>:n, z the first dim it does not
  // split and n divides. Where no such dim exists (e.g. hidden 6656 over 5 pipelines) that state
  // stays unsharded. Without zero flags the state is sharded like the tensor itself. Zero flags are
  // cleared in the result.
  Annotation optimizer_state(const Shape& shape) const;

  std::string to_string() const;
  static Annotation parse(std::string_view text);

  // Copies share one body, so comparing a copy with its original costs no walk over the subgroups.
  friend bool operator==(const Annotation& a, const Annotation& b) {
    if (a.body_ == b.body_) return true;
    if (!a.body_ || !b.body_ || a.body_->hash != b.body_->hash) return false;
    return a.body_->hdim == b.body_->hdim && a.body_->dg_union == b.body_->dg_union &&
           a.body_->ds_union == b.body_->ds_union;
  }
  size_t hash() const;

 private:
  // Where each device of a multi-group union sits: index over devices(), group by group; the
  // subgroup is the last group_begin at or before that position. Shared by copies and by the
  // annotations with_hdim / with_ds_union derive (same groups).
  struct Locator {
    RunIndex index;
    std::vector<int> group_begin;
  };
  static Annotation assemble(std::vector<DeviceGroup> dg_union, std::vector<DistState> ds_union, int hdim,
                             std::shared_ptr<const Locator> locator);

  // Immutable and shared by copies: an annotation over thousands of ranks holds one group and one
  // state per pipeline, and deduction, plans, executable graphs and reports copy annotations by
  // the thousands (each copy was two lists and a reference count per subgroup).
  struct Body {
    std::vector<DeviceGroup> dg_union;
    std::vector<DistState> ds_union;
    int hdim = kDuplicate;
    std::shared_ptr<const Locator> locator;  // hsize > 1 only
    size_t hash = 0;                         // of hdim and both unions, computed once
  };
  std::shared_ptr<const Locator> locator() const { return body_ ? body_->locator : nullptr; }

  std::shared_ptr<const Body> body_;  // null: no annotation
};

struct AnnotationHash {
  size_t operator()(const Annotation& a) const { return a.hash(); }
};

}  // namespace hspmd::sharding
