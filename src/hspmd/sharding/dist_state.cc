#include "hspmd/sharding/dist_state.h"

#include <sstream>

#include "hspmd/core/error.h"
#include "hspmd/sharding/text_cursor.h"

namespace hspmd::sharding {

DistState DistState::split(int dim, int n) {
  HSPMD_CHECK(dim >= 0) << "DistState::split needs a physical dim >= 0, got " << dim;
  return make({{dim, n}});
}
DistState DistState::dup(int n) { return make({{kDuplicate, n}}); }
DistState DistState::partial(int n) { return make({{kPartial, n}}); }

DistState DistState::make(std::vector<Entry> entries, bool zero) {
  DistState ds;
  ds.zero_ = zero;
  std::vector<Entry> kept;
  for (const Entry& e : entries) {
    HSPMD_CHECK(e.dim >= kPartial) << "DistState dim " << e.dim << " is not -2 (partial), -1 (duplicate) or >= 0";
    HSPMD_CHECK(e.degree >= 1) << "DistState degree " << e.degree << " for dim " << e.dim << " must be >= 1";
    for (const Entry& prev : entries) {
      HSPMD_CHECK(&prev == &e || prev.dim != e.dim) << "DistState names dim " << e.dim << " twice";
    }
    if (e.degree > 1) kept.push_back(e);
  }
  if (!kept.empty()) ds.entries_ = std::make_shared<const std::vector<Entry>>(std::move(kept));
  return ds;
}

DistState DistState::with_zero(bool zero) const {
  DistState ds = *this;
  ds.zero_ = zero;
  return ds;
}

int DistState::device_num() const {
  int n = 1;
  for (const Entry& e : entries()) n *= e.degree;
  return n;
}

int DistState::degree(int dim) const {
  for (const Entry& e : entries()) {
    if (e.dim == dim) return e.degree;
  }
  return 1;
}

int DistState::max_split_dim() const {
  int m = -1;
  for (const Entry& e : entries()) m = std::max(m, e.dim);
  return m;
}

int DistState::coord(int index, int dim) const {
  HSPMD_ASSERT(index >= 0 && index < device_num()) << "index " << index << " outside " << to_string();
  // Mixed radix, last entry fastest.
  for (int i = static_cast<int>(entries().size()) - 1; i >= 0; --i) {
    const int c = index % entries()[i].degree;
    if (entries()[i].dim == dim) return c;
    index /= entries()[i].degree;
  }
  return 0;
}

Region DistState::region(int index, const Region& part) const {
  Region r = part;
  for (const Entry& e : entries()) {
    if (e.dim >= 0) r = r.piece(e.dim, e.degree, coord(index, e.dim));
  }
  return r;
}

void DistState::check_fits(const Region& part, const std::string& tensor) const {
  for (const Entry& e : entries()) {
    if (e.dim < 0) continue;
    HSPMD_CHECK(e.dim < part.rank()) << "tensor " << tensor << ": " << to_string() << " splits dim " << e.dim
                                     << " but the tensor has rank " << part.rank();
    HSPMD_CHECK(part.extent(e.dim) % e.degree == 0)
        << "tensor " << tensor << ": split degree " << e.degree << " of " << to_string()
        << " does not divide dim " << e.dim << " of size " << part.extent(e.dim);
  }
}

std::string DistState::to_string() const {
  std::ostringstream out;
  out << "(";
  for (size_t i = 0; i < entries().size(); ++i) {
    const Entry& e = entries()[i];
    out << (i ? "," : "");
    if (e.dim == kPartial) {
      out << "P";
    } else if (e.dim == kDuplicate) {
      out << "D";
    } else {
      out << "S" << e.dim;
    }
    out << ":" << e.degree;
  }
  if (zero_) out << ";zero";
  out << ")";
  return out.str();
}

DistState DistState::parse(detail::TextCursor& c) {
  c.expect('(');
  std::vector<Entry> entries;
  bool zero = false;
  if (!c.accept(')')) {
    bool has_entries = !c.accept(';');
    if (has_entries) {
      do {
        int dim;
        if (c.accept('P')) {
          dim = kPartial;
        } else if (c.accept('D')) {
          dim = kDuplicate;
        } else if (c.accept('S')) {
          dim = static_cast<int>(c.integer());
          if (dim < 0) c.fail("a split dim >= 0");
        } else {
          c.fail("P, D or S<dim>");
        }
        c.expect(':');
        entries.push_back({dim, static_cast<int>(c.integer())});
      } while (c.accept(','));
    }
    if (!has_entries || c.accept(';')) {
      if (!c.accept_word("zero")) c.fail("'zero'");
      zero = true;
    }
    c.expect(')');
  }
  return make(std::move(entries), zero);
}

DistState DistState::parse(std::string_view text) {
  detail::TextCursor c(text, "DistState");
  DistState ds = parse(c);
  c.expect_end();
  return ds;
}

size_t DistState::hash() const {
  size_t h = zero_ ? 0x51ed27ull : 0xcbf29ce484222325ull;
  for (const Entry& e : entries()) {
    h = (h ^ static_cast<size_t>(e.dim + 3)) * 0x100000001b3ull;
    h = (h ^ static_cast<size_t>(e.degree)) * 0x100000001b3ull;
  }
  return h;
}

}  // namespace hspmd::sharding
