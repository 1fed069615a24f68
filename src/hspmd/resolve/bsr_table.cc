#include "hspmd/resolve/bsr_table.h"

#include <algorithm>

#include "hspmd/core/error.h"

namespace hspmd::resolve {

namespace {

// Group by group, in the order of Annotation::devices(): looking each device up with
// Annotation::region would search every subgroup, which is the ranks squared under data parallelism
// (one subgroup per replica).
BsrTable::DeviceRegions regions_of(const sharding::Annotation& a, const Shape& shape) {
  BsrTable::DeviceRegions out;
  for (int g = 0; g < a.hsize(); ++g) {
    const Region part = a.group_part(g, shape);
    const std::vector<int>& devices = a.group(g).devices();
    for (int i = 0; i < static_cast<int>(devices.size()); ++i) out.emplace_back(devices[i], a.ds(g).region(i, part));
  }
  return out;
}

// Per dim, the sorted cut points of every region; interval k of dim d is [cuts[d][k], cuts[d][k+1]).
std::vector<std::vector<int64_t>> cut_points(const BsrTable::DeviceRegions& a, const BsrTable::DeviceRegions& b,
                                             int rank) {
  std::vector<std::vector<int64_t>> cuts(rank);
  for (const auto* list : {&a, &b}) {
    for (const auto& [dev, r] : *list) {
      for (int d = 0; d < rank; ++d) {
        cuts[d].push_back(r.begin[d]);
        cuts[d].push_back(r.end[d]);
      }
    }
  }
  for (auto& c : cuts) {
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
  }
  return cuts;
}

// Calls f(flat index) for every finest slice inside region r (row-major over intervals).
template <typename F>
void for_each_slice(const Region& r, const std::vector<std::vector<int64_t>>& cuts, F&& f) {
  const int rank = r.rank();
  std::vector<int> lo(rank), hi(rank), idx(rank);
  for (int d = 0; d < rank; ++d) {
    lo[d] = static_cast<int>(std::lower_bound(cuts[d].begin(), cuts[d].end(), r.begin[d]) - cuts[d].begin());
    hi[d] = static_cast<int>(std::lower_bound(cuts[d].begin(), cuts[d].end(), r.end[d]) - cuts[d].begin());
    if (lo[d] >= hi[d]) return;
  }
  idx = lo;
  while (true) {
    int64_t flat = 0;
    for (int d = 0; d < rank; ++d) flat = flat * static_cast<int64_t>(cuts[d].size() - 1) + idx[d];
    f(flat);
    int d = rank - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < hi[d]) break;
      idx[d] = lo[d];
    }
    if (d < 0) return;
  }
}

}  // namespace

int BsrTable::add(const std::string& name, const sharding::Annotation& src, const sharding::Annotation& dst,
                  const Shape& shape, int64_t element_size, const std::vector<int>& dead) {
  HSPMD_CHECK(!src.has_partial() && !dst.has_partial())
      << "tensor " << name << ": Partial never goes to BSR (" << src.to_string() << " -> " << dst.to_string()
      << "); reduce it with a collective first";
  DeviceRegions owners = regions_of(src, shape);
  std::erase_if(owners, [&](const auto& o) { return std::find(dead.begin(), dead.end(), o.first) != dead.end(); });
  return add_regions(name, owners, regions_of(dst, shape), element_size);
}

int BsrTable::add_regions(const std::string& name, const DeviceRegions& src, const DeviceRegions& dst,
                          int64_t element_size) {
  auto slices = std::make_shared<std::vector<BsrSlice>>();
  if (dst.empty()) return add_slices(name, std::move(slices));
  const int rank = dst.front().second.rank();
  const auto cuts = cut_points(src, dst, rank);
  int64_t count = 1;
  for (const auto& c : cuts) count *= static_cast<int64_t>(c.size() - 1);
  std::vector<std::vector<int>> owners(count), receivers(count);
  for (const auto& [dev, r] : dst) for_each_slice(r, cuts, [&](int64_t s) { receivers[s].push_back(dev); });
  for (const auto& [dev, r] : src) for_each_slice(r, cuts, [&](int64_t s) { owners[s].push_back(dev); });
  for (int64_t s = 0; s < count; ++s) {
    if (receivers[s].empty()) continue;
    BsrSlice e;
    e.region.begin.resize(rank);
    e.region.end.resize(rank);
    int64_t rest = s;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t n = static_cast<int64_t>(cuts[d].size() - 1);
      const int64_t k = rest % n;
      rest /= n;
      e.region.begin[d] = cuts[d][k];
      e.region.end[d] = cuts[d][k + 1];
    }
    HSPMD_CHECK(!owners[s].empty()) << "tensor " << name << ": slice " << e.region.to_string()
                                    << " is needed by device " << receivers[s].front()
                                    << " but no (live) source device owns it; restore it from a checkpoint";
    e.owners = std::move(owners[s]);
    e.receivers = std::move(receivers[s]);
    std::sort(e.owners.begin(), e.owners.end());
    std::sort(e.receivers.begin(), e.receivers.end());
    e.bytes = e.region.numel() * element_size;
    slices->push_back(std::move(e));
  }
  return add_slices(name, std::move(slices));
}

int BsrTable::add_copy(const std::string& name, const BsrTable& from, int tensor) {
  HSPMD_ASSERT(tensor >= 0 && tensor < static_cast<int>(from.slices_.size()))
      << "BSR table: no tensor " << tensor << " to copy '" << name << "' from";
  return add_slices(name, from.slices_[tensor]);
}

int BsrTable::add_slices(const std::string& name, Slices slices) {
  const int tensor = static_cast<int>(names_.size());
  names_.push_back(name);
  for (const BsrSlice& s : *slices) entries_.push_back({tensor, &s});
  slices_.push_back(std::move(slices));
  return tensor;
}

}  // namespace hspmd::resolve
