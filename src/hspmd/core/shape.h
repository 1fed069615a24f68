// Concrete tensor shapes. Dimension letters used across hspmd: B batch, S sequence, T tokens
// (packed B*S), H hidden, V vocab, Nq/Nkv query/key-value heads, D head dim, F MLP (intermediate).
//
//   Shape s{4, 512, 64};   // rank 3, numel 131072
//   s.dim(-1) == 64;        // negative dims count from the back
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace hspmd {

class Shape {
 public:
  Shape() = default;  // rank 0: a scalar with one element
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::vector<int64_t> dims);

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t numel() const;
  // Size of dimension d; negative d counts from the back. Throws Error when out of range.
  int64_t dim(int d) const;
  int64_t operator[](int d) const { return dim(d); }
  // Normalizes a possibly negative dim index into [0, rank); throws Error when out of range.
  int canonical_dim(int d) const;
  const std::vector<int64_t>& dims() const { return dims_; }
  // Shape with dimension d replaced by size.
  Shape with_dim(int d, int64_t size) const;
  // Product of the dims in [begin, end).
  int64_t numel_between(int begin, int end) const;

  std::string to_string() const;  // "[4, 512, 64]"
  friend bool operator==(const Shape&, const Shape&) = default;

 private:
  std::vector<int64_t> dims_;
};

}  // namespace hspmd
