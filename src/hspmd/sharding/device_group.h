// DeviceGroup: an ordered list of global device ids (ranks). Order matters: a device's index in
// the group is what a DistState maps to shard coordinates.
//
//   DeviceGroup g = DeviceGroup::range(4, 8);   // [4-7]
//   g.index_of(6) == 2;  g.to_string() == "[4-7]";
//   DeviceGroup::parse("[0-1,8,3]") == DeviceGroup({0, 1, 8, 3});
//
//   DeviceGroup::parse("[0-96/32,1]") == DeviceGroup({0, 32, 64, 96, 1});
//
// Text form (sharding/int_runs.h): runs of consecutive ascending ids are written a-b, runs of 3 or
// more ids evenly spaced by s > 1 a-b/s, the rest comma-separated; parse reads it back exactly.
// A group is immutable and its copies share one list and one index (sharding/int_runs.h):
// index_of costs O(log runs), a copy one reference count. Every annotation of a plan at thousands
// of ranks holds its groups, so per-copy lists and linear lookups made planning quadratic.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hspmd/sharding/int_runs.h"

namespace hspmd::sharding {

namespace detail {
class TextCursor;
}

class DeviceGroup {
 public:
  DeviceGroup() = default;
  // Throws Error on a negative or repeated id.
  explicit DeviceGroup(std::vector<int> devices);
  static DeviceGroup range(int begin, int end);  // [begin, end)

  int size() const { return data_ ? static_cast<int>(data_->devices.size()) : 0; }
  bool empty() const { return !data_; }
  int operator[](int i) const { return data_->devices[i]; }
  const std::vector<int>& devices() const {
    static const std::vector<int> kNone;
    return data_ ? data_->devices : kNone;
  }
  int index_of(int device) const;  // -1 when absent
  bool contains(int device) const { return index_of(device) >= 0; }

  std::string to_string() const;
  static DeviceGroup parse(std::string_view text);
  static DeviceGroup parse(detail::TextCursor& cursor);

  friend bool operator==(const DeviceGroup& a, const DeviceGroup& b) {
    return a.data_ == b.data_ || a.devices() == b.devices();
  }
  size_t hash() const;

 private:
  struct Data {
    std::vector<int> devices;
    RunIndex index;
    size_t hash = 0;
  };
  std::shared_ptr<const Data> data_;  // null: the empty group
};

struct DeviceGroupHash {
  size_t operator()(const DeviceGroup& g) const { return g.hash(); }
};

}  // namespace hspmd::sharding
