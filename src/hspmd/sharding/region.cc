#include "hspmd/sharding/region.h"

#include <algorithm>
#include <string>

#include "hspmd/core/append_number.h"
#include "hspmd/core/error.h"

namespace hspmd::sharding {

Region Region::full(const Shape& shape) {
  Region r;
  r.begin.assign(shape.rank(), 0);
  r.end = shape.dims();
  return r;
}

int64_t Region::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank(); ++d) n *= extent(d);
  return n;
}

Shape Region::shape() const {
  std::vector<int64_t> dims(rank());
  for (int d = 0; d < rank(); ++d) dims[d] = extent(d);
  return Shape(std::move(dims));
}

bool Region::contains(const Region& o) const {
  HSPMD_ASSERT(rank() == o.rank()) << to_string() << " vs " << o.to_string();
  for (int d = 0; d < rank(); ++d) {
    if (o.begin[d] < begin[d] || o.end[d] > end[d]) return false;
  }
  return true;
}

std::optional<Region> Region::intersect(const Region& o) const {
  HSPMD_ASSERT(rank() == o.rank()) << to_string() << " vs " << o.to_string();
  Region r;
  r.begin.resize(rank());
  r.end.resize(rank());
  for (int d = 0; d < rank(); ++d) {
    r.begin[d] = std::max(begin[d], o.begin[d]);
    r.end[d] = std::min(end[d], o.end[d]);
    if (r.begin[d] >= r.end[d]) return std::nullopt;
  }
  return r;
}

Region Region::piece(int d, int parts, int n) const {
  HSPMD_ASSERT(d >= 0 && d < rank() && parts > 0 && n >= 0 && n < parts) << "piece " << n << "/" << parts;
  HSPMD_CHECK(extent(d) % parts == 0) << "extent " << extent(d) << " of dim " << d << " in region "
                                      << to_string() << " is not divisible into " << parts << " parts";
  Region r = *this;
  const int64_t chunk = extent(d) / parts;
  r.begin[d] = begin[d] + chunk * n;
  r.end[d] = r.begin[d] + chunk;
  return r;
}

std::string Region::to_string() const {
  std::string out;
  append_text(out);
  return out;
}

void Region::append_text(std::string& out) const {
  out += '[';
  for (int d = 0; d < rank(); ++d) {
    if (d) out += ", ";
    append_number(out, begin[d]);
    out += ':';
    append_number(out, end[d]);
  }
  out += ']';
}

}  // namespace hspmd::sharding
