#include "hspmd/core/region_copy.h"

#include <cstddef>

#include "hspmd/core/error.h"

namespace hspmd {

namespace {

// One dimension of the box, in bytes for the innermost.
struct Dim {
  int64_t extent, src_size, dst_size, src_start, dst_start;
};

}  // namespace

std::vector<StridedCopy> plan_region_copy(const std::vector<int64_t>& src_shape, const std::vector<int64_t>& src_starts,
                                          const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& dst_starts,
                                          const std::vector<int64_t>& extents, int64_t element_bytes) {
  const size_t rank = extents.size();
  HSPMD_CHECK(src_shape.size() == rank && dst_shape.size() == rank && src_starts.size() == rank &&
              dst_starts.size() == rank)
      << "region copy: src rank " << src_shape.size() << ", dst rank " << dst_shape.size() << ", starts "
      << src_starts.size() << " and " << dst_starts.size() << " for a box of rank " << rank;
  HSPMD_CHECK(element_bytes > 0) << "region copy: element_bytes " << element_bytes;
  for (size_t d = 0; d < rank; ++d) {
    HSPMD_CHECK(extents[d] >= 0 && src_starts[d] >= 0 && dst_starts[d] >= 0 &&
                src_starts[d] + extents[d] <= src_shape[d] && dst_starts[d] + extents[d] <= dst_shape[d])
        << "region copy: dimension " << d << " of the box (start " << src_starts[d] << " in src of size "
        << src_shape[d] << ", start " << dst_starts[d] << " in dst of size " << dst_shape[d] << ", extent "
        << extents[d] << ") does not fit";
    if (extents[d] == 0) return {};
  }
  // Innermost first, in bytes; a dimension the box covers whole in both tensors merges into the
  // one outside it.
  std::vector<Dim> dims{{element_bytes, element_bytes, element_bytes, 0, 0}};
  for (size_t k = rank; k-- > 0;) {
    const Dim d{extents[k], src_shape[k], dst_shape[k], src_starts[k], dst_starts[k]};
    Dim& inner = dims.back();
    if (inner.extent == inner.src_size && inner.extent == inner.dst_size) {
      inner = {d.extent * inner.extent, d.src_size * inner.src_size, d.dst_size * inner.dst_size,
               d.src_start * inner.src_size, d.dst_start * inner.dst_size};
    } else {
      dims.push_back(d);
    }
  }
  while (dims.size() < 3) dims.push_back({1, 1, 1, 0, 0});
  // Byte strides, innermost first.
  std::vector<int64_t> src_stride(dims.size()), dst_stride(dims.size());
  src_stride[0] = dst_stride[0] = 1;
  for (size_t i = 1; i < dims.size(); ++i) {
    src_stride[i] = src_stride[i - 1] * dims[i - 1].src_size;
    dst_stride[i] = dst_stride[i - 1] * dims[i - 1].dst_size;
  }
  StridedCopy base{.width = dims[0].extent,
                   .height = dims[1].extent,
                   .depth = dims[2].extent,
                   .src_offset = 0,
                   .src_pitch = src_stride[1],
                   .src_rows = dims[1].src_size,
                   .dst_offset = 0,
                   .dst_pitch = dst_stride[1],
                   .dst_rows = dims[1].dst_size};
  for (size_t i = 0; i < dims.size(); ++i) {
    base.src_offset += dims[i].src_start * src_stride[i];
    base.dst_offset += dims[i].dst_start * dst_stride[i];
  }
  // One copy per index of the dimensions outside the innermost three.
  std::vector<StridedCopy> copies{base};
  for (size_t i = 3; i < dims.size(); ++i) {
    std::vector<StridedCopy> next;
    next.reserve(copies.size() * static_cast<size_t>(dims[i].extent));
    for (int64_t j = 0; j < dims[i].extent; ++j) {
      for (StridedCopy c : copies) {
        c.src_offset += j * src_stride[i];
        c.dst_offset += j * dst_stride[i];
        next.push_back(c);
      }
    }
    copies = std::move(next);
  }
  return copies;
}

}  // namespace hspmd
