// BsrTable (§5.3, Figure 11 left): the tensor cut into the finest slices implied by the source and
// destination layouts, each slice with the devices that own it and the devices that need it.
//
//   W [4, 4], source (S0:2) on [0-1], destination (S1:2) on [2-3]. Finest slices: 2 x 2.
//     slice [0:2, 0:2]  owners {0}  receivers {2}
//     slice [0:2, 2:4]  owners {0}  receivers {3}
//     slice [2:4, 0:2]  owners {1}  receivers {2}
//     slice [2:4, 2:4]  owners {1}  receivers {3}
// Slices nobody needs are left out. One table may hold many tensors (the fused BSR of §7); entries
// are ordered by tensor, then row-major by slice, so every rank scans them in the same order.
// Partial never goes to BSR: adding a partial annotation is an error.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hspmd/core/shape.h"
#include "hspmd/sharding/annotation.h"
#include "hspmd/sharding/region.h"

namespace hspmd::resolve {

using sharding::Region;

struct BsrEntry {
  int tensor = 0;
  Region slice;
  std::vector<int> owners;     // ascending device ids
  std::vector<int> receivers;  // ascending device ids
  int64_t bytes = 0;           // size of the slice
};

class BsrTable {
 public:
  using DeviceRegions = std::vector<std::pair<int, Region>>;  // (device, region it holds)

  // Adds one tensor resharded from src to dst; returns its tensor index. Devices in `dead` (e.g.
  // failed GPUs in elastic recovery) are not owners: their slices must come from live replicas.
  int add(const std::string& name, const sharding::Annotation& src, const sharding::Annotation& dst,
          const Shape& shape, int64_t element_size, const std::vector<int>& dead = {});
  // Adds one tensor given explicit source and destination regions (e.g. one subgroup's part in a
  // bottom-tier BSR). Every needed slice must have an owner.
  int add_regions(const std::string& name, const DeviceRegions& src, const DeviceRegions& dst, int64_t element_size);

  const std::vector<BsrEntry>& entries() const { return entries_; }
  const std::vector<std::string>& tensor_names() const { return names_; }

 private:
  std::vector<BsrEntry> entries_;
  std::vector<std::string> names_;
};

}  // namespace hspmd::resolve
