// Bottom-tier rules (§5.1, Figure 7 left, Figure 8): one sharding subgroup reshards its part of
// the tensor on its own. Each rule states its precondition and lowers the subgroup's reshard to
// per-device ops; the resolver tries them in table order and falls back to a BSR of the subgroup.
//
//   rule      precondition (src -> dst DistState, same part of the tensor)
//   Identity  same DS, same DG
//   SR        same DS, DG differs: device src[i] sends its shard to dst[i]
//   AR        same DG; the DSes differ at one position only, P:n -> D:n
//   RS        same DG; ... P:n -> Sd:n
//   AG        same DG; ... Sd:n -> D:n
//   Slice     same DG; ... D:n -> Sd:n (local, no communication)
// "Differ at one position only": same entries in the same order except one whose dim changes
// and the new dim is not used elsewhere; the collective runs over the n devices that share every
// other coordinate. Example: (D:2,P:4) -> (D:2,S0:4) on [0-7] is RS over [0-3] and over [4-7].
#pragma once

#include <cstdint>
#include <vector>

#include "hspmd/resolve/comm_op.h"
#include "hspmd/sharding/annotation.h"

namespace hspmd::resolve {

struct GroupReshard {
  sharding::DeviceGroup src_group;
  sharding::DistState src_ds;
  sharding::DeviceGroup dst_group;
  sharding::DistState dst_ds;
  Region part;  // the part of the global tensor this subgroup shards, on both sides
  int64_t element_size = 4;
};

struct BottomRule {
  ReshardKind kind;
  const char* precondition;
  bool (*applies)(const GroupReshard&);
  void (*lower)(const GroupReshard&, DeviceOps&);  // appends to the devices' op lists
};

const std::vector<BottomRule>& bottom_tier_rules();
// The first rule that applies, or nullptr (then the subgroup needs a BSR).
const BottomRule* match_bottom_rule(const GroupReshard& r);

}  // namespace hspmd::resolve
