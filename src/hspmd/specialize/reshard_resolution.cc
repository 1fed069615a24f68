#include "hspmd/specialize/reshard_resolution.h"

#include <algorithm>

#include "hspmd/core/error.h"

namespace hspmd::specialize {

using sharding::Annotation;

bool GroupResolution::involves(int device) const {
  const std::vector<int> devices = resolution->devices();
  if (std::binary_search(devices.begin(), devices.end(), device)) return true;
  // Devices with only local work (Identity) still hold a part.
  for (const resolve::ResolveStep& step : resolution->steps) {
    if (step.from.locate(device) || step.to.locate(device)) return true;
  }
  return false;
}

namespace {

const SymBinding& binding_of(const std::vector<SymBinding>& bindings, int g) {
  HSPMD_ASSERT(!bindings.empty()) << "resolve_reshard: no symbol bindings";
  return bindings.size() == 1 ? bindings[0] : bindings.at(g);
}

}  // namespace

std::vector<GroupResolution> resolve_reshard(const Annotation& src, const Annotation& dst, const SymShape& shape,
                                             const std::vector<SymBinding>& bindings, const std::string& tensor,
                                             resolve::ResolveCache& cache) {
  const int hdim = src.hdim();
  // One subgroup on each side: its binding is the whole story (an hsize-1 annotation's hdim reads -1).
  const bool single = src.hsize() == 1 && dst.hsize() == 1;
  const bool per_group = single || (src.hsize() == dst.hsize() && hdim == dst.hdim() && hdim >= 0 &&
                                    hdim < static_cast<int>(shape.size()) && !shape[hdim].symbols().empty());
  std::vector<GroupResolution> out;
  if (per_group) {
    for (int g = 0; g < src.hsize(); ++g) {
      Shape part = evaluate(shape, binding_of(bindings, g));
      const resolve::Resolution& r = cache.resolve(Annotation::spmd(src.group(g), src.ds(g)),
                                                   Annotation::spmd(dst.group(g), dst.ds(g)), part, tensor);
      out.push_back({g, std::move(part), &r});
    }
    return out;
  }
  std::vector<int64_t> global = evaluate(shape, binding_of(bindings, 0)).dims();
  for (int g = 1; g < static_cast<int>(bindings.size()); ++g) {
    HSPMD_CHECK(evaluate(shape, bindings[g]).dims() == global)
        << "Reshard '" << tensor << "' from " << src.to_string() << " to " << dst.to_string()
        << " changes the top tier of a tensor whose shape " << to_string(shape)
        << " differs between sharding subgroups; only Reshards that keep hsize and the split dim can move "
           "tensors with per-group sizes";
  }
  // A bound symbol is a subgroup's share of a top-tier split dim: the global extent is hsize times it.
  for (const Annotation* a : {&src, &dst}) {
    const int d = a->hdim();
    if (d >= 0 && d < static_cast<int>(shape.size()) && !shape[d].symbols().empty()) {
      global[d] *= a->hsize();
      break;
    }
  }
  const Shape whole(std::move(global));
  out.push_back({-1, whole, &cache.resolve(src, dst, whole, tensor)});
  return out;
}

const GroupResolution* resolution_of(const std::vector<GroupResolution>& all, int device) {
  for (const GroupResolution& r : all) {
    if (r.involves(device)) return &r;
  }
  return nullptr;
}

}  // namespace hspmd::specialize
