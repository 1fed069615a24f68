#include "hspmd/graph/cuda/cuda_compute.h"

#include "hspmd/core/cuda/cuda_error.h"
#include "hspmd/core/error.h"
#include "hspmd/graph/cuda/cuda_kernels.h"
#include "hspmd/kernels/cuda/adamw.h"
#include "hspmd/kernels/cuda/elementwise.h"
#include "hspmd/kernels/cuda/slice.h"

namespace hspmd::graph {

namespace {

namespace kc = kernels::cuda;

// The stream of the GPU a tensor lives on, with that GPU made current while the guard lives.
struct Launch {
  cudaStream_t stream;
  cuda::DeviceGuard current;
};
Launch launch_on(const Tensor& t) {
  cuda::CudaTensorMemory& memory = cuda::cuda_tensor_memory(*t.allocator());
  return {memory.stream(), cuda::DeviceGuard(memory.device_index())};
}

void expect_float32(const char* what, const Tensor& t) {
  HSPMD_CHECK(t.dtype() == DType::kFloat32) << what << ": the GPU trainer's tensors are float32, got "
                                            << t.to_string();
}

}  // namespace

ComputeDevice cuda_compute(cuda::CudaTensorMemory::Options options) {
  Allocator allocator = cuda::make_cuda_allocator(std::move(options));
  return {
      .allocator = allocator,
      .kernels = &cuda_kernels(),
      .add = [](const Tensor& a, const Tensor& b, const Tensor& out) {
        HSPMD_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype() && a.numel() == b.numel() &&
                    a.numel() == out.numel())
            << "add: " << a.to_string() << " + " << b.to_string() << " into " << out.to_string();
        const Launch on = launch_on(out);
        kc::add(a.dtype(), a.device_raw_data(), b.device_raw_data(), out.device_raw_data(), a.numel(), on.stream);
      },
      .add_sum_squares = [](const Tensor& x, const Tensor& total) {
        expect_float32("add_sum_squares", x);
        HSPMD_CHECK(total.dtype() == DType::kFloat64 && total.numel() == 1 && total.device() == x.device())
            << "add_sum_squares: the total must be one float64 on " << x.to_string() << "'s GPU, got "
            << total.to_string();
        // The sum reads only the gradient; the pack it shares with AdamW wants every pointer set.
        float* g = x.device_data<float>();
        const kc::AdamWTensor t{.param = g, .grad = g, .m = g, .v = g, .numel = x.numel(), .param_bf16 = nullptr};
        const Launch on = launch_on(x);
        kc::add_grad_sum_of_squares({&t, 1}, total.device_data<double>(), on.stream);
      },
      .add_to_total = [](const Tensor& x, const Tensor& total, int64_t at) {
        HSPMD_CHECK(x.numel() >= 1 && total.dtype() == DType::kFloat64 && at >= 0 && at < total.numel() &&
                    total.device() == x.device())
            << "add_to_total: " << x.to_string() << " into element " << at << " of " << total.to_string()
            << " (float64 on the same GPU)";
        const Launch on = launch_on(total);
        kc::add_element_to_total(x.dtype(), x.device_raw_data(), total.device_data<double>() + at, on.stream);
      },
      .adamw_step = [](const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, int64_t step,
                       const kernels::AdamWOptions& o) {
        for (const Tensor* t : {&p, &g, &m, &v}) expect_float32("adamw_step", *t);
        HSPMD_CHECK(g.numel() == p.numel() && m.numel() == p.numel() && v.numel() == p.numel())
            << "adamw_step: param " << p.to_string() << ", grad " << g.to_string() << ", m " << m.to_string()
            << ", v " << v.to_string();
        const kc::AdamWTensor t{.param = p.device_data<float>(),
                                .grad = g.device_data<float>(),
                                .m = m.device_data<float>(),
                                .v = v.device_data<float>(),
                                .numel = p.numel(),
                                .param_bf16 = nullptr};
        const Launch on = launch_on(p);
        kc::adamw_step({&t, 1}, step, o, {.max_grad_norm = 0, .sum_of_squares = nullptr}, on.stream);
      },
      .copy_region = [](const Tensor& src, const std::vector<int64_t>& src_starts, const Tensor& dst,
                        const std::vector<int64_t>& dst_starts, const std::vector<int64_t>& extents) {
        HSPMD_CHECK(src.defined() && dst.defined() && src.device() == dst.device() && src.dtype() == dst.dtype())
            << "copy_region on a GPU: " << src.to_string() << " into " << dst.to_string()
            << " (both on the same GPU, one dtype)";
        const Launch on = launch_on(dst);
        kc::copy_region(src.device_raw_data(), src.shape().dims(), src_starts, dst.device_raw_data(),
                        dst.shape().dims(), dst_starts, extents, src.dtype(), on.stream);
      }};
}

}  // namespace hspmd::graph
