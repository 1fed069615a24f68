// One corner of a Region (sharding/region.h): a coordinate per tensor dim. Tensors have few dims,
// so up to kInlineDims coordinates live inside the object and a Region needs no heap allocation;
// planning a switch at 4,096 ranks makes millions of them, and two allocations per Region made
// allocation over half of that time. More dims spill to the heap, so any rank still works.
//
//   RegionBounds b{0, 4};   b[1] == 4;   b.push_back(6);   std::vector<int64_t> v = b;
//
// It reads like std::vector<int64_t> (index, iterate, push_back, resize, compare
// lexicographically), so code written against the vector keeps working and orders the same.
#pragma once

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <utility>
#include <vector>

namespace hspmd::sharding {

class RegionBounds {
 public:
  static constexpr size_t kInlineDims = 4;
  using value_type = int64_t;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;

  RegionBounds() = default;
  RegionBounds(std::initializer_list<int64_t> values) { assign(values.begin(), values.end()); }
  // Implicit, like the vector it replaces: `region.end = shape.dims()`.
  RegionBounds(const std::vector<int64_t>& values) { assign(values.begin(), values.end()); }  // NOLINT
  RegionBounds(const RegionBounds& o) { assign(o.begin(), o.end()); }
  RegionBounds& operator=(const RegionBounds& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  RegionBounds(RegionBounds&& o) noexcept { take(o); }
  RegionBounds& operator=(RegionBounds&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  ~RegionBounds() { release(); }

  // Implicit, so the many callers that take `const std::vector<int64_t>&` (kernels' starts and
  // extents) read a corner as before.
  operator std::vector<int64_t>() const { return {begin(), end()}; }  // NOLINT

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t* data() { return spilled() ? heap_ : inline_; }
  const int64_t* data() const { return spilled() ? heap_ : inline_; }
  int64_t& operator[](size_t d) { return data()[d]; }
  int64_t operator[](size_t d) const { return data()[d]; }
  iterator begin() { return data(); }
  iterator end() { return data() + size_; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + size_; }

  void push_back(int64_t value) {
    if (size_ == capacity_) reserve(2 * capacity_);
    data()[size_++] = value;
  }
  void resize(size_t n, int64_t value = 0) {
    reserve(n);
    if (n > size_) std::fill(data() + size_, data() + n, value);
    size_ = static_cast<uint32_t>(n);
  }
  void assign(size_t n, int64_t value) {
    size_ = 0;
    resize(n, value);
  }
  template <std::input_iterator It>
  void assign(It first, It last) {
    size_ = 0;
    for (; first != last; ++first) push_back(*first);
  }

  friend bool operator==(const RegionBounds& a, const RegionBounds& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend std::strong_ordering operator<=>(const RegionBounds& a, const RegionBounds& b) {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  bool spilled() const { return capacity_ > kInlineDims; }
  void reserve(size_t n) {
    if (n <= capacity_) return;
    auto* grown = new int64_t[n];
    std::copy(data(), data() + size_, grown);
    release();
    heap_ = grown;
    capacity_ = static_cast<uint32_t>(n);
  }
  // Frees the heap buffer, if any; the size is left for the caller to set.
  void release() {
    if (spilled()) delete[] heap_;
    capacity_ = kInlineDims;
  }
  // Moves o's coordinates here (this holds no heap buffer) and leaves o empty.
  void take(RegionBounds& o) {
    if (o.spilled()) {
      heap_ = o.heap_;
      capacity_ = o.capacity_;
      o.capacity_ = kInlineDims;
    } else {
      std::copy(o.inline_, o.inline_ + o.size_, inline_);
    }
    size_ = std::exchange(o.size_, 0);
  }

  // The coordinates live in inline_ until there are more than kInlineDims, then in heap_ (owned).
  union {
    int64_t inline_[kInlineDims] = {};
    int64_t* heap_;
  };
  uint32_t size_ = 0;
  uint32_t capacity_ = kInlineDims;
};

}  // namespace hspmd::sharding
