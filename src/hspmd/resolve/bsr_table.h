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
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hspmd/core/shape.h"
#include "hspmd/sharding/annotation.h"
#include "hspmd/sharding/region.h"

namespace hspmd::resolve {

using sharding::Region;

// One finest slice of a layout: where it is, who owns it, who needs it. Tensors resharded alike
// share their slices (BsrTable::add_copy), so a table of thousands of identically laid out tensors
// holds each device list once.
struct BsrSlice {
  Region region;
  std::vector<int> owners;     // ascending device ids
  std::vector<int> receivers;  // ascending device ids
  int64_t bytes = 0;           // size of the slice
};

// One slice of one tensor.
struct BsrEntry {
  int tensor = 0;
  const BsrSlice* layout = nullptr;  // owned by the table (shared by its copies)

  const Region& slice() const { return layout->region; }
  const std::vector<int>& owners() const { return layout->owners; }
  const std::vector<int>& receivers() const { return layout->receivers; }
  int64_t bytes() const { return layout->bytes; }
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
  // Adds one tensor resharded exactly like tensor `tensor` of `from` (this table or another): its
  // entries, under the new tensor's index. Many tensors share one layout (every layer's q_proj in
  // one pipeline stage, a parameter's two moments), and deriving the slices once per layout keeps
  // a switch of thousands of ranks from recomputing every device's region per tensor.
  int add_copy(const std::string& name, const BsrTable& from, int tensor);

  const std::vector<BsrEntry>& entries() const { return entries_; }
  const std::vector<std::string>& tensor_names() const { return names_; }

 private:
  using Slices = std::shared_ptr<const std::vector<BsrSlice>>;

  int add_slices(const std::string& name, Slices slices);

  std::vector<BsrEntry> entries_;      // point into slices_
  std::vector<std::string> names_;
  std::vector<Slices> slices_;         // per tensor, its layout's (shared by tensors laid out alike)
};

}  // namespace hspmd::resolve
