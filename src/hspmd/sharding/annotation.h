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

  int hsize() const { return static_cast<int>(dg_union_.size()); }
  int hdim() const { return hdim_; }
  const std::vector<DeviceGroup>& dg_union() const { return dg_union_; }
  const std::vector<DistState>& ds_union() const { return ds_union_; }
  const DeviceGroup& group(int g) const { return dg_union_[g]; }
  const DistState& ds(int g) const { return ds_union_[g]; }
  bool is_null() const { return dg_union_.empty(); }

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

  friend bool operator==(const Annotation& a, const Annotation& b) {
    return a.hdim_ == b.hdim_ && a.dg_union_ == b.dg_union_ && a.ds_union_ == b.ds_union_;
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

  std::vector<DeviceGroup> dg_union_;
  std::vector<DistState> ds_union_;
  int hdim_ = kDuplicate;
  std::shared_ptr<const Locator> locator_;  // hsize > 1 only
};

struct AnnotationHash {
  size_t operator()(const Annotation& a) const { return a.hash(); }
};

}  // namespace hspmd::sharding
