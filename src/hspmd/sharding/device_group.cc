#include "hspmd/sharding/device_group.h"

#include "hspmd/core/error.h"
#include "hspmd/sharding/text_cursor.h"

namespace hspmd::sharding {

namespace {

size_t hash_of(const std::vector<int>& devices) {
  size_t h = 0x9e3779b97f4a7c15ull;
  for (int d : devices) h = (h ^ static_cast<size_t>(d)) * 0x100000001b3ull;
  return h;
}

}  // namespace

DeviceGroup::DeviceGroup(std::vector<int> devices) {
  if (devices.empty()) return;
  for (int d : devices) HSPMD_CHECK(d >= 0) << "device group has a negative device id " << d;
  RunIndex index(devices);
  HSPMD_CHECK(!index.repeated()) << "device " << *index.repeated() << " appears twice in device group ["
                                 << runs_text(devices) << "]";
  const size_t h = hash_of(devices);
  data_ = std::make_shared<const Data>(Data{std::move(devices), std::move(index), h});
}

DeviceGroup DeviceGroup::range(int begin, int end) {
  HSPMD_CHECK(0 <= begin && begin <= end) << "bad device range " << begin << ".." << end;
  std::vector<int> d(end - begin);
  for (int i = begin; i < end; ++i) d[i - begin] = i;
  return DeviceGroup(std::move(d));
}

int DeviceGroup::index_of(int device) const { return data_ ? data_->index.position(device) : -1; }

std::string DeviceGroup::to_string() const { return "[" + runs_text(devices()) + "]"; }

DeviceGroup DeviceGroup::parse(detail::TextCursor& c) {
  c.expect('[');
  std::vector<int> devices;
  if (!c.accept(']')) {
    do {
      long long first = c.integer();
      long long last = first;
      long long step = 1;
      if (c.accept('-')) {
        last = c.integer();
        if (c.accept('/')) step = c.integer();
      }
      if (first < 0 || last < first || last - first > 1000000) c.fail("a device id or an ascending range a-b");
      if (step < 1 || (last - first) % step != 0) c.fail("a step s >= 1 of a-b/s that divides b - a");
      for (long long d = first; d <= last; d += step) devices.push_back(static_cast<int>(d));
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

size_t DeviceGroup::hash() const { return data_ ? data_->hash : hash_of({}); }

}  // namespace hspmd::sharding
