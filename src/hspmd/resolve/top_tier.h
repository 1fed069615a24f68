// Top-tier rules (§5.2 I, Figure 9): source and destination share dg_union and ds_union and only
// hdim changes. The tensor is cut into the finest slices of all subgroups' (bottom-tier) layouts
// and one collective per slice runs across the subgroups, each subgroup keeping its own
// bottom-tier sharding:
//
//   rule        hdim          precondition
//   SplitAR     -2 -> -1
//   SplitRS     -2 -> d       no DistState splits d
//   SplitAG      d -> -1      no DistState splits d
//   SplitSlice  -1 -> d       no DistState splits d (local, no communication)
// and every slice is held by the same number k of devices in every subgroup (k > 1 when a
// subgroup duplicates it); the j-th holders of all subgroups form collective j, in subgroup
// order (member g owns part g along d). When subgroups hold a partial slice different numbers of
// times (TP 2 next to TP 1 duplicating a norm weight's gradient) and no DistState is partial,
// SplitAR and SplitRS become one all-reduce per slice over every holder in which only each
// subgroup's first holder adds its summand (CommOp::zero_input), each member keeping its part.
//
//   W [8, 4], dg_union {[0-1], [2-5]}, ds_union {(S1:2), (S1:4)}, hdim 0 -> -1 (ZeRO gather):
//   finest column slices [:, 0:1] ... [:, 3:4]; slice [:, 0:1] is held by 0 and 2, so device 0
//   and device 2 all-gather rows 0:4 | 4:8 of it: AllGather group=[0,2] dim=0 [0:8, 0:1].
#pragma once

#include <cstdint>
#include <vector>

#include "hspmd/core/shape.h"
#include "hspmd/resolve/comm_op.h"
#include "hspmd/sharding/annotation.h"

namespace hspmd::resolve {

struct TopReshard {
  sharding::Annotation src;  // same dg_union and ds_union as dst, different hdim
  sharding::Annotation dst;
  Shape shape;
  int64_t element_size = 4;
};

struct TopRule {
  ReshardKind kind;
  const char* precondition;
  bool (*applies)(const TopReshard&);
  void (*lower)(const TopReshard&, DeviceOps&);
};

const std::vector<TopRule>& top_tier_rules();
const TopRule* match_top_rule(const TopReshard& r);

}  // namespace hspmd::resolve
