// A hyper-rectangle of a global tensor: per dimension a half-open interval [begin, end).
// Regions are how annotations describe which part of the global tensor a device holds and how
// communication ops describe which part they move.
//
//   Shape [8, 6] split 2 ways along dim 0:  device 0 holds Region{{0, 0}, {4, 6}}  "[0:4, 0:6]"
//                                           device 1 holds Region{{4, 0}, {8, 6}}  "[4:8, 0:6]"
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hspmd/core/shape.h"
#include "hspmd/sharding/region_bounds.h"

namespace hspmd::sharding {

struct Region {
  RegionBounds begin;  // inclusive, one per dim
  RegionBounds end;    // exclusive, one per dim

  static Region full(const Shape& shape);
  int rank() const { return static_cast<int>(begin.size()); }
  int64_t extent(int d) const { return end[d] - begin[d]; }
  int64_t numel() const;
  Shape shape() const;
  bool contains(const Region& other) const;
  // The overlap of two regions of the same rank, or nullopt when they do not overlap.
  std::optional<Region> intersect(const Region& other) const;
  // The n-th of `parts` equal pieces along dim d; the extent must be divisible by parts.
  Region piece(int d, int parts, int n) const;
  std::string to_string() const;  // "[0:4, 0:6]"
  void append_text(std::string& out) const;  // to_string() appended to `out`

  friend bool operator==(const Region&, const Region&) = default;
  friend auto operator<=>(const Region&, const Region&) = default;
};

}  // namespace hspmd::sharding
