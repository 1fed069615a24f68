#include "hspmd/sharding/annotation.h"

#include <algorithm>
#include <sstream>

#include "hspmd/core/error.h"
#include "hspmd/sharding/text_cursor.h"

namespace hspmd::sharding {

Annotation Annotation::make(std::vector<DeviceGroup> dg_union, std::vector<DistState> ds_union, int hdim) {
  HSPMD_CHECK(dg_union.size() == ds_union.size())
      << "hsize mismatch: dg_union has " << dg_union.size() << " groups but ds_union has " << ds_union.size()
      << " DistStates";
  HSPMD_CHECK(hdim >= kPartial) << "hdim " << hdim << " is not -2 (partial), -1 (duplicate) or >= 0";
  std::shared_ptr<Locator> locator;
  if (dg_union.size() > 1) {
    locator = std::make_shared<Locator>();
    std::vector<int> all;
    for (const DeviceGroup& g : dg_union) {
      locator->group_begin.push_back(static_cast<int>(all.size()));
      all.insert(all.end(), g.devices().begin(), g.devices().end());
    }
    locator->index = RunIndex(all);
    if (const std::optional<int> d = locator->index.repeated()) {
      std::vector<std::string> holders;
      for (const DeviceGroup& g : dg_union) {
        if (g.contains(*d)) holders.push_back(g.to_string());
      }
      HSPMD_THROW() << "device " << *d << " is in two groups of the dg_union: " << holders.at(0) << " and "
                    << holders.at(1);
    }
  }
  return assemble(std::move(dg_union), std::move(ds_union), hdim, std::move(locator));
}

Annotation Annotation::assemble(std::vector<DeviceGroup> dg_union, std::vector<DistState> ds_union, int hdim,
                                std::shared_ptr<const Locator> locator) {
  HSPMD_CHECK(!dg_union.empty()) << "an annotation needs at least one device group";
  for (size_t g = 0; g < dg_union.size(); ++g) {
    HSPMD_CHECK(ds_union[g].device_num() == dg_union[g].size())
        << "DistState " << ds_union[g].to_string() << " has " << ds_union[g].device_num()
        << " devices (product of degrees) but its device group " << dg_union[g].to_string() << " has "
        << dg_union[g].size();
  }
  auto body = std::make_shared<Body>();
  body->hdim = dg_union.size() == 1 ? kDuplicate : hdim;
  body->dg_union = std::move(dg_union);
  body->ds_union = std::move(ds_union);
  body->locator = std::move(locator);
  size_t h = static_cast<size_t>(body->hdim + 3);
  for (size_t g = 0; g < body->dg_union.size(); ++g) {
    h = (h * 0x100000001b3ull) ^ body->dg_union[g].hash();
    h = (h * 0x100000001b3ull) ^ body->ds_union[g].hash();
  }
  body->hash = h;
  Annotation a;
  a.body_ = std::move(body);
  return a;
}

const std::vector<DeviceGroup>& Annotation::dg_union() const {
  static const std::vector<DeviceGroup> kNone;
  return body_ ? body_->dg_union : kNone;
}

const std::vector<DistState>& Annotation::ds_union() const {
  static const std::vector<DistState> kNone;
  return body_ ? body_->ds_union : kNone;
}

Annotation Annotation::spmd(DeviceGroup group, DistState ds) {
  return make({std::move(group)}, {std::move(ds)}, kDuplicate);
}

std::vector<int> Annotation::devices() const {
  std::vector<int> out;
  for (const DeviceGroup& g : dg_union()) out.insert(out.end(), g.devices().begin(), g.devices().end());
  return out;
}

std::optional<std::pair<int, int>> Annotation::locate(int device) const {
  if (!body_ || !body_->locator) {
    const int i = is_null() ? -1 : body_->dg_union[0].index_of(device);
    if (i < 0) return std::nullopt;
    return std::make_pair(0, i);
  }
  const int at = body_->locator->index.position(device);
  if (at < 0) return std::nullopt;
  const std::vector<int>& begins = body_->locator->group_begin;
  const int g = static_cast<int>(std::upper_bound(begins.begin(), begins.end(), at) - begins.begin()) - 1;
  return std::make_pair(g, at - begins[g]);
}

bool Annotation::has_partial() const {
  if (hdim() == kPartial) return true;
  for (const DistState& ds : ds_union()) {
    if (ds.has_partial()) return true;
  }
  return false;
}

Region Annotation::group_part(int g, const Shape& shape) const {
  Region full = Region::full(shape);
  return hdim() >= 0 ? full.piece(hdim(), hsize(), g) : full;
}

std::optional<Region> Annotation::region(int device, const Shape& shape) const {
  auto where = locate(device);
  if (!where) return std::nullopt;
  return ds(where->first).region(where->second, group_part(where->first, shape));
}

void Annotation::validate_for(const Shape& shape, const std::string& tensor) const {
  HSPMD_CHECK(!is_null()) << "tensor " << tensor << " has no annotation";
  if (hdim() >= 0) {
    HSPMD_CHECK(hdim() < shape.rank()) << "tensor " << tensor << ": hdim " << hdim() << " of " << to_string()
                                      << " is out of range for shape " << shape.to_string();
    HSPMD_CHECK(shape.dim(hdim()) % hsize() == 0)
        << "tensor " << tensor << ": hsize " << hsize() << " of " << to_string() << " does not divide dim "
        << hdim() << " of size " << shape.dim(hdim());
  }
  for (int g = 0; g < hsize(); ++g) ds(g).check_fits(group_part(g, shape), tensor);
}

Annotation Annotation::with_hdim(int hdim) const {
  HSPMD_CHECK(hdim >= kPartial) << "hdim " << hdim << " is not -2 (partial), -1 (duplicate) or >= 0";
  return assemble(dg_union(), ds_union(), hdim, locator());
}

Annotation Annotation::with_ds_union(std::vector<DistState> ds_union) const {
  HSPMD_CHECK(ds_union.size() == dg_union().size())
      << "hsize mismatch: dg_union has " << dg_union().size() << " groups but ds_union has " << ds_union.size()
      << " DistStates";
  return assemble(dg_union(), std::move(ds_union), hdim(), locator());
}

namespace {

// First physical dim of `shape` that none of `states` splits, or -1.
// The first dim that no DistState splits and that `parts` divides, or -1.
int first_unsplit_dim(const std::vector<DistState>& states, const Shape& shape, int64_t parts) {
  for (int d = 0; d < shape.rank(); ++d) {
    bool split = false;
    for (const DistState& ds : states) split = split || ds.degree(d) > 1;
    if (!split && shape[d] % parts == 0) return d;
  }
  return -1;
}

}  // namespace

Annotation Annotation::optimizer_state(const Shape& shape) const {
  bool any_zero = false;
  std::vector<DistState> cleared;
  for (const DistState& ds : ds_union()) {
    any_zero = any_zero || ds.zero();
    cleared.push_back(ds.with_zero(false));
  }
  if (!any_zero) return *this;
  if (hsize() > 1 && hdim() == kDuplicate) {
    const int z = first_unsplit_dim(ds_union(), shape, hsize());
    return assemble(dg_union(), std::move(cleared), z >= 0 ? z : kDuplicate, locator());
  }
  std::vector<DistState> states;
  for (size_t g = 0; g < ds_union().size(); ++g) {
    const DistState& ds = ds_union()[g];
    const int n = ds.degree(kDuplicate);
    const int z = n > 1 && ds.zero() ? first_unsplit_dim({ds}, group_part(static_cast<int>(g), shape).shape(), n) : -1;
    if (z < 0) {
      states.push_back(ds.with_zero(false));
      continue;
    }
    std::vector<DistState::Entry> entries = ds.entries();
    for (auto& e : entries) {
      if (e.dim == kDuplicate) e.dim = z;
    }
    states.push_back(DistState::make(std::move(entries)));
  }
  return assemble(dg_union(), std::move(states), hdim(), locator());
}

std::string Annotation::to_string() const {
  if (is_null()) return "none";
  std::ostringstream out;
  if (hdim() == kPartial) {
    out << "partial";
  } else if (hdim() == kDuplicate) {
    out << "dup";
  } else {
    out << "split" << hdim();
  }
  out << "{";
  for (int g = 0; g < hsize(); ++g) out << (g ? ";" : "") << group(g).to_string() << ds(g).to_string();
  out << "}";
  return out.str();
}

Annotation Annotation::parse(std::string_view text) {
  detail::TextCursor c(text, "annotation");
  int hdim;
  if (c.accept_word("partial")) {
    hdim = kPartial;
  } else if (c.accept_word("dup")) {
    hdim = kDuplicate;
  } else if (c.accept_word("split")) {
    hdim = static_cast<int>(c.integer());
    if (hdim < 0) c.fail("a split dim >= 0");
  } else {
    c.fail("'dup', 'partial' or 'split<d>'");
  }
  c.expect('{');
  std::vector<DeviceGroup> groups;
  std::vector<DistState> states;
  do {
    groups.push_back(DeviceGroup::parse(c));
    states.push_back(DistState::parse(c));
  } while (c.accept(';'));
  c.expect('}');
  c.expect_end();
  return make(std::move(groups), std::move(states), hdim);
}

size_t Annotation::hash() const {
  // An empty annotation hashes as one with no subgroups and hdim -1 would.
  return body_ ? body_->hash : static_cast<size_t>(kDuplicate + 3);
}

}  // namespace hspmd::sharding
