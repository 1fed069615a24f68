// Internal helpers of the CPU kernels: turn a tensor's runtime dtype into a typed pointer so one
// templated body serves every supported element type, with errors that name the kernel and tensor.
//
//   check_floating("rms_norm_fwd", "x", x);              // float32 or float64, else Error
//   check_same_dtype("rms_norm_fwd", "x", x, "y", y);     // y must have x's dtype
//   visit_floating(x, [&](auto* px) {                     // px is float* or double*
//     using T = std::remove_pointer_t<decltype(px)>;
//     ...
//   });
//   visit_index("embedding_fwd", "ids", ids, [&](const auto* id) { ... id[t] ... });  // int32/int64
//
// Not part of the kernel API: include only from src/hspmd/kernels/cpu/*.cc.
#pragma once

#include <cstdint>
#include <type_traits>  // std::remove_pointer_t in the visitors' callers

#include "hspmd/core/error.h"
#include "hspmd/core/tensor.h"

namespace hspmd::kernels::cpu {

inline void check_defined(const char* kernel, const char* name, const Tensor& t) {
  HSPMD_CHECK(t.defined()) << kernel << ": tensor '" << name << "' is undefined";
}

inline void check_floating(const char* kernel, const char* name, const Tensor& t) {
  check_defined(kernel, name, t);
  HSPMD_CHECK(t.dtype() == DType::kFloat32 || t.dtype() == DType::kFloat64)
      << kernel << ": '" << name << "' is " << t.to_string() << ", expected float32 or float64";
}

inline void check_same_dtype(const char* kernel, const char* ref_name, const Tensor& ref, const char* name,
                             const Tensor& t) {
  check_defined(kernel, name, t);
  HSPMD_CHECK(t.dtype() == ref.dtype()) << kernel << ": '" << name << "' is " << t.to_string() << " but '"
                                        << ref_name << "' is " << ref.to_string() << " (dtypes must match)";
}

// Calls f(float*) or f(double*) for a tensor already checked with check_floating.
template <typename F>
void visit_floating(const Tensor& t, F&& f) {
  if (t.dtype() == DType::kFloat32) {
    f(t.data<float>());
  } else {
    f(t.data<double>());
  }
}

// Calls f(const int32_t*) or f(const int64_t*) for token ids, positions or targets.
template <typename F>
void visit_index(const char* kernel, const char* name, const Tensor& t, F&& f) {
  check_defined(kernel, name, t);
  if (t.dtype() == DType::kInt32) {
    f(static_cast<const int32_t*>(t.data<int32_t>()));
  } else {
    HSPMD_CHECK(t.dtype() == DType::kInt64)
        << kernel << ": '" << name << "' is " << t.to_string() << ", expected int32 or int64";
    f(static_cast<const int64_t*>(t.data<int64_t>()));
  }
}

// Below this many elements of work a kernel runs on one thread: starting a parallel region costs
// more than it saves. 2^17 floats are tens of microseconds of memory-bound work; on a busy host a
// fork/join that has to wait for the second core's time slice costs more than that
// (docs/cpu-kernels.md, "Small loops run on one thread").
inline constexpr int64_t kParallelThreshold = 1 << 17;

}  // namespace hspmd::kernels::cpu
