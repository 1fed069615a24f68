#include "hspmd/core/shape.h"

#include "hspmd/core/error.h"

namespace hspmd {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::vector<int64_t>(dims)) {}

Shape::Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {
  for (int64_t d : dims_) HSPMD_CHECK(d >= 0) << "negative dimension in shape " << to_string();
}

int64_t Shape::numel() const { return numel_between(0, rank()); }

int64_t Shape::numel_between(int begin, int end) const {
  int64_t n = 1;
  for (int i = begin; i < end; ++i) n *= dims_[i];
  return n;
}

int Shape::canonical_dim(int d) const {
  int c = d < 0 ? d + rank() : d;
  HSPMD_CHECK(c >= 0 && c < rank()) << "dimension " << d << " out of range for shape " << to_string();
  return c;
}

int64_t Shape::dim(int d) const { return dims_[canonical_dim(d)]; }

Shape Shape::with_dim(int d, int64_t size) const {
  std::vector<int64_t> dims = dims_;
  dims[canonical_dim(d)] = size;
  return Shape(std::move(dims));
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

}  // namespace hspmd
