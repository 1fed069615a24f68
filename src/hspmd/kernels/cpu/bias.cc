// Bias addition on the CPU (spec in kernels/bias.h): rows in parallel, each a contiguous add.
#include "hspmd/kernels/bias.h"

#include "hspmd/kernels/cpu/typed_visit.h"

namespace hspmd::kernels {

void bias_add(const Tensor& x, const Tensor& bias, const Tensor& y) {
  cpu::check_floating("bias_add", "x", x);
  cpu::check_same_dtype("bias_add", "x", x, "bias", bias);
  cpu::check_same_dtype("bias_add", "x", x, "y", y);
  HSPMD_CHECK(x.rank() >= 1 && bias.rank() == 1 && bias.dim(0) == x.dim(x.rank() - 1))
      << "bias_add: bias " << bias.to_string() << " must be [N] for x " << x.to_string() << " [..., N]";
  HSPMD_CHECK(y.shape() == x.shape()) << "bias_add: y " << y.to_string() << " must be shaped like x " << x.to_string();
  const int64_t n = bias.dim(0), rows = n == 0 ? 0 : x.numel() / n;
  cpu::visit_floating(x, [&](auto* px) {
    using T = std::remove_pointer_t<decltype(px)>;
    const T* b = bias.data<T>();
    T* py = y.data<T>();
#pragma omp parallel for schedule(static) if (x.numel() >= cpu::kParallelThreshold)
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < n; ++i) py[r * n + i] = px[r * n + i] + b[i];
    }
  });
}

}  // namespace hspmd::kernels
