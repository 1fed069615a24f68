// Element types of tensors. bfloat16 is storage only: kernels compute in float32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "hspmd/core/bfloat16.h"

namespace hspmd {

enum class DType : uint8_t { kFloat32, kFloat64, kBFloat16, kInt32, kInt64 };

size_t dtype_size(DType dtype);
// Canonical short names: "float32", "float64", "bfloat16", "int32", "int64".
std::string_view dtype_name(DType dtype);
// Parses a canonical name (also "f32", "fp32", "f64", "bf16", "i32", "i64"); throws Error otherwise.
DType parse_dtype(std::string_view text);
bool is_floating(DType dtype);

// Maps a C++ element type to its DType: dtype_of<float>() == DType::kFloat32.
template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kFloat32; }
template <> constexpr DType dtype_of<double>() { return DType::kFloat64; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::kBFloat16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kInt32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::kInt64; }

}  // namespace hspmd
