// DistState: the bottom-tier sharding of a tensor over one device group (paper §4.1).
//
// A DistState is an ordered list of entries (dim, degree). dim is a logical distributed dimension:
//   kPartial (-2)   P:n   n devices hold summands; the value is their sum
//   kDuplicate (-1) D:n   n devices hold identical copies
//   d >= 0          Sd:n  the tensor is cut into n equal pieces along physical dim d
// The product of degrees is the number of devices in the group. The order maps a device's index
// in its group to shard coordinates, mixed radix, the FIRST entry outermost (slowest varying):
//
//   DistState ds = DistState::make({{kDuplicate, 2}, {0, 4}});   // text "(D:2,S0:4)"
//   // device index 0..3 -> D coordinate 0, S0 coordinate 0..3
//   // device index 4..7 -> D coordinate 1, S0 coordinate 0..3   (TP 4 inside, 2 replicas outside)
//   ds.coord(5, 0) == 1;  ds.coord(5, kDuplicate) == 1;  ds.device_num() == 8;
//
// `zero` marks a tensor whose optimizer state is sharded over its duplicate replicas (ZeRO-1);
// text suffix ";zero": "(D:2,S0:4;zero)". Degree-1 entries are dropped, so every sharding has one
// canonical value: DistState() == DistState::dup(1), text "()".
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hspmd/sharding/region.h"

namespace hspmd::sharding {

namespace detail {
class TextCursor;
}

inline constexpr int kPartial = -2;
inline constexpr int kDuplicate = -1;

class DistState {
 public:
  struct Entry {
    int dim;     // kPartial, kDuplicate or a physical dim >= 0
    int degree;  // >= 1
    friend bool operator==(const Entry&, const Entry&) = default;
  };

  DistState() = default;  // one device, whole tensor
  static DistState split(int dim, int n);
  static DistState dup(int n);
  static DistState partial(int n);
  // Entries outermost first. Throws Error on a repeated dim, a degree < 1 or a dim < -2.
  static DistState make(std::vector<Entry> entries, bool zero = false);
  DistState with_zero(bool zero) const;

  const std::vector<Entry>& entries() const {
    static const std::vector<Entry> kNone;
    return entries_ ? *entries_ : kNone;
  }
  bool zero() const { return zero_; }
  int device_num() const;
  int degree(int dim) const;  // 1 when dim is not sharded
  bool has_partial() const { return degree(kPartial) > 1; }
  bool is_trivial() const { return !entries_; }
  // Largest physical dim that is split, or -1.
  int max_split_dim() const;

  // Coordinate of the device with group index `index` along logical dim `dim` (0 when absent).
  int coord(int index, int dim) const;
  // The part of `part` held by the device with group index `index` (splits cut `part` evenly).
  Region region(int index, const Region& part) const;
  // Throws Error naming `tensor` when a split dim is out of range or its degree does not divide
  // the extent of `part` along it.
  void check_fits(const Region& part, const std::string& tensor) const;

  std::string to_string() const;
  static DistState parse(std::string_view text);
  static DistState parse(detail::TextCursor& cursor);

  friend bool operator==(const DistState& a, const DistState& b) {
    return a.zero_ == b.zero_ && (a.entries_ == b.entries_ || a.entries() == b.entries());
  }
  size_t hash() const;

 private:
  // Immutable and shared by copies: an annotation over thousands of ranks holds one DistState per
  // subgroup, and copying annotations (deduction copies every op's inputs) allocated one list each.
  std::shared_ptr<const std::vector<Entry>> entries_;  // null: no entries
  bool zero_ = false;
};

}  // namespace hspmd::sharding
