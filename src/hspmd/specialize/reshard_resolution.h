// Resolution of one Reshard of the graph, where the tensor's shape may be symbolic and its symbols
// bound differently in each sharding subgroup (paper A.2: each pipeline runs its own micro-batch
// size, so an activation [T, H] has T = 512 in pipeline 0 and T = 256 in pipeline 1).
//
//   src = split0{[0-1](D:2);[4]()}   layer 1's output, on stage 0 of each pipeline
//   dst = split0{[2-3](D:2);[5]()}   next stage of each pipeline
//   bindings = {{"T": 512}, {"T": 256}}  one per subgroup
//   resolve_reshard(src, dst, {T, 128}, bindings, "model.layers.1.output", cache)
//     -> two GroupResolutions: subgroup 0 on shape [512, 128] ([0-1] -> [2-3]: SR),
//                              subgroup 1 on shape [256, 128] ([4] -> [5]: SR)
// Per subgroup when src and dst have the same hsize and the same hdim d >= 0 and dim d depends on
// a symbol (its per-group extent is only known per group): each subgroup g is resolved alone, from
// Annotation::spmd(src group g) to Annotation::spmd(dst group g), on the shape evaluated with
// bindings[g] (also when both have a single subgroup). Otherwise the tensor is resolved whole
// (resolve/resolver.h) on its global shape: then every symbol the shape uses must be bound
// identically in all subgroups, or the top-tier split would need per-group sizes the resolver
// cannot express (Error naming the tensor).
#pragma once

#include <string>
#include <vector>

#include "hspmd/core/sym_expr.h"
#include "hspmd/resolve/resolver.h"
#include "hspmd/sharding/annotation.h"

namespace hspmd::specialize {

struct GroupResolution {
  int group = -1;                  // subgroup index of src (and dst); -1: the whole tensor
  Shape shape;                     // the shape resolved: the subgroup's part, or the global shape
  const resolve::Resolution* resolution = nullptr;  // owned by the cache
  // Devices with a part in this resolution (src or dst side).
  bool involves(int device) const;
};

// `bindings` has one entry per subgroup of src (or one entry used for all).
std::vector<GroupResolution> resolve_reshard(const sharding::Annotation& src, const sharding::Annotation& dst,
                                             const SymShape& shape, const std::vector<SymBinding>& bindings,
                                             const std::string& tensor, resolve::ResolveCache& cache);

// The one of `resolve_reshard`'s results that `device` takes part in; nullptr when none.
const GroupResolution* resolution_of(const std::vector<GroupResolution>& all, int device);

}  // namespace hspmd::specialize
