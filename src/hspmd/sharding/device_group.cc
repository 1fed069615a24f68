#include "hspmd/sharding/device_group.h"

#include <algorithm>
#include <unordered_set>

#include "hspmd/core/error.h"
#include "hspmd/sharding/int_runs.h"
#include "hspmd/sharding/text_cursor.h"

namespace hspmd::sharding {

DeviceGroup::DeviceGroup(std::vector<int> devices) : devices_(std::move(devices)) {
  std::unordered_set<int> seen;
  for (int d : devices_) {
    HSPMD_CHECK(d >= 0) << "device group has a negative device id " << d;
    HSPMD_CHECK(seen.insert(d).second) << "device " << d << " appears twice in device group " << to_string();
  }
}

DeviceGroup DeviceGroup::range(int begin, int end) {
  HSPMD_CHECK(0 <= begin && begin <= end) << "bad device range " << begin << ".." << end;
  std::vector<int> d(end - begin);
  for (int i = begin; i < end; ++i) d[i - begin] = i;
  return DeviceGroup(std::move(d));
}

int DeviceGroup::index_of(int device) const {
  auto it = std::find(devices_.begin(), devices_.end(), device);
  return it == devices_.end() ? -1 : static_cast<int>(it - devices_.begin());
}

std::string DeviceGroup::to_string() const { return "[" + runs_text(devices_) + "]"; }

DeviceGroup DeviceGroup::parse(detail::TextCursor& c) {
  c.expect('[');
  std::vector<int> devices;
  if (!c.accept(']')) {
    do {
      long long first = c.integer();
      long long last = first;
      if (c.accept('-')) last = c.integer();
      if (first < 0 || last < first || last - first > 1000000) c.fail("a device id or an ascending range a-b");
      for (long long d = first; d <= last; ++d) devices.push_back(static_cast<int>(d));
    } while (c.accept(','));
    c.expect(']');
  }
  return DeviceGroup(std::move(devices));
}

DeviceGroup DeviceGroup::parse(std::string_view text) {
  detail::TextCursor c(text, "device group");
  DeviceGroup g = parse(c);
  c.expect_end();
  return g;
}

size_t DeviceGroup::hash() const {
  size_t h = 0x9e3779b97f4a7c15ull;
  for (int d : devices_) h = (h ^ static_cast<size_t>(d)) * 0x100000001b3ull;
  return h;
}

}  // namespace hspmd::sharding
