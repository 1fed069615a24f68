// Internal helper of the CPU kernels (beside typed_visit.h): element-count checks whose message names
// the kernel and both tensors, e.g.
//
//   check_same_numel("add", "a", a, "out", out);
//     -> "add: 'a' float32[3, 4] and 'out' float32[4, 4] differ in numel"
//
// Not part of the kernel API: include only from src/hspmd/kernels/cpu/*.cc.
#pragma once

#include "hspmd/core/error.h"
#include "hspmd/core/tensor.h"
#include "hspmd/kernels/cpu/typed_visit.h"

namespace hspmd::kernels::cpu {

inline void check_same_numel(const char* kernel, const char* ref_name, const Tensor& ref, const char* name,
                             const Tensor& t) {
  check_defined(kernel, ref_name, ref);
  check_defined(kernel, name, t);
  HSPMD_CHECK(t.numel() == ref.numel()) << kernel << ": '" << ref_name << "' " << ref.to_string() << " and '"
                                        << name << "' " << t.to_string() << " differ in numel";
}

// Same numel and same dtype: the usual precondition of elementwise-style kernels.
inline void check_like(const char* kernel, const char* ref_name, const Tensor& ref, const char* name,
                       const Tensor& t) {
  check_same_numel(kernel, ref_name, ref, name, t);
  check_same_dtype(kernel, ref_name, ref, name, t);
}

}  // namespace hspmd::kernels::cpu
