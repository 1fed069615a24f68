#include "hspmd/core/dtype.h"

#include "hspmd/core/error.h"

namespace hspmd {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kBFloat16: return 2;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
  }
  HSPMD_THROW() << "invalid dtype " << static_cast<int>(dtype);
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
  }
  HSPMD_THROW() << "invalid dtype " << static_cast<int>(dtype);
}

DType parse_dtype(std::string_view text) {
  if (text == "float32" || text == "f32" || text == "fp32") return DType::kFloat32;
  if (text == "float64" || text == "f64" || text == "fp64") return DType::kFloat64;
  if (text == "bfloat16" || text == "bf16") return DType::kBFloat16;
  if (text == "int32" || text == "i32") return DType::kInt32;
  if (text == "int64" || text == "i64") return DType::kInt64;
  HSPMD_THROW() << "unknown dtype '" << text << "' (expected float32, float64, bfloat16, int32 or int64)";
}

bool is_floating(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kBFloat16;
}

}  // namespace hspmd
