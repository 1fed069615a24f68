// Parameter initializers. A value is a pure function of (seed, parameter name, global element
// index) through Philox (architecture §9), so a shard holding elements [offset, offset + numel) of a
// parameter generates exactly its slice of the single-process tensor:
//
//   InitSpec spec = InitSpec::normal(0.02);
//   Tensor full = init_tensor("w", Shape{8, 4}, DType::kFloat32, spec, /*seed=*/7);
//   Tensor rows_4_to_7 = init_tensor("w", Shape{4, 4}, DType::kFloat32, spec, 7, /*offset=*/16);
//   // rows_4_to_7 == rows 4..7 of full, bit for bit
#pragma once

#include <cstdint>
#include <string>

#include "hspmd/core/tensor.h"

namespace hspmd::graph {

struct InitSpec {
  enum class Kind { kZeros, kOnes, kNormal };
  Kind kind = Kind::kZeros;
  double std = 0.0;  // kNormal: mean 0, this standard deviation

  static InitSpec zeros() { return {Kind::kZeros, 0.0}; }
  static InitSpec ones() { return {Kind::kOnes, 0.0}; }
  static InitSpec normal(double std) { return {Kind::kNormal, std}; }
  std::string to_string() const;  // "zeros", "ones", "normal(0.02)"
  friend bool operator==(const InitSpec&, const InitSpec&) = default;
};

// Elements [offset, offset + shape.numel()) of the parameter `name` in row-major global order.
Tensor init_tensor(const std::string& name, const Shape& shape, DType dtype, const InitSpec& spec, uint64_t seed,
                   uint64_t offset = 0, Allocator* allocator = nullptr);

}  // namespace hspmd::graph
