// DeviceGroup: an ordered list of global device ids (ranks). Order matters: a device's index in
// the group is what a DistState maps to shard coordinates.
//
//   DeviceGroup g = DeviceGroup::range(4, 8);   // [4-7]
//   g.index_of(6) == 2;  g.to_string() == "[4-7]";
//   DeviceGroup::parse("[0-1,8,3]") == DeviceGroup({0, 1, 8, 3});
//
// Text form: runs of consecutive ascending ids are written a-b, the rest comma-separated.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

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

  int size() const { return static_cast<int>(devices_.size()); }
  bool empty() const { return devices_.empty(); }
  int operator[](int i) const { return devices_[i]; }
  const std::vector<int>& devices() const { return devices_; }
  int index_of(int device) const;  // -1 when absent
  bool contains(int device) const { return index_of(device) >= 0; }

  std::string to_string() const;
  static DeviceGroup parse(std::string_view text);
  static DeviceGroup parse(detail::TextCursor& cursor);

  friend bool operator==(const DeviceGroup&, const DeviceGroup&) = default;
  size_t hash() const;

 private:
  std::vector<int> devices_;
};

}  // namespace hspmd::sharding
