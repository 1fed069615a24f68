// CUDA multi-tensor AdamW against the CPU kernel (kernels/adamw.h) over three steps: more tensors
// than one launch takes, odd sizes, gradient-norm clipping computed on the device, and the bf16
// copy of the updated weights.
#include "hspmd/kernels/cuda/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu/gpu_testlib.h"
#include "hspmd/kernels/adamw.h"

namespace hspmd::kernels::cuda {
namespace {

using namespace hspmd::testing;

TEST_F(GpuTest, MultiTensorAdamWWithClippingMatchesTheCpu) {
  const int count = kAdamWTensorsPerLaunch + 5;  // two launches
  const AdamWOptions options{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1,
                             .grad_scale = 1.0};
  const double max_grad_norm = 1.0;  // below the random gradients' norm: clipping acts
  std::vector<Tensor> param, grad, m, v;
  std::vector<hspmd::cuda::DeviceBuffer> gparam, ggrad, gm, gv, gparam16;
  std::vector<AdamWTensor> tensors;
  for (int i = 0; i < count; ++i) {
    const int64_t n = i == 3 ? 0 : int64_t{97} * i * i + 1;  // 1 .. ~130k, one empty
    param.push_back(random_tensor({n}, DType::kFloat32, 100 + i));
    grad.push_back(random_tensor({n}, DType::kFloat32, 200 + i));
    m.push_back(Tensor::zeros({n}, DType::kFloat32));
    v.push_back(Tensor::zeros({n}, DType::kFloat32));
    gparam.push_back(upload(param.back()));
    ggrad.push_back(upload(grad.back()));
    gm.push_back(upload(m.back()));
    gv.push_back(upload(v.back()));
    gparam16.push_back(device_empty({n}, DType::kBFloat16));
    tensors.push_back({.param = gparam.back().as<float>(),
                       .grad = ggrad.back().as<float>(),
                       .m = gm.back().as<float>(),
                       .v = gv.back().as<float>(),
                       .numel = n,
                       .param_bf16 = gparam16.back().as<__nv_bfloat16>()});
  }
  auto sumsq = device_empty({1}, DType::kFloat64);
  for (int64_t step = 1; step <= 3; ++step) {
    double cpu_sumsq = 0;
    for (const Tensor& g : grad) {
      for (int64_t k = 0; k < g.numel(); ++k) cpu_sumsq += std::pow(static_cast<double>(g.data<float>()[k]), 2);
    }
    const double norm = std::sqrt(cpu_sumsq);
    ASSERT_GT(norm, max_grad_norm);
    AdamWOptions cpu_options = options;
    cpu_options.grad_scale = max_grad_norm / norm;
    for (int i = 0; i < count; ++i) kernels::adamw_step(param[i], grad[i], m[i], v[i], step, cpu_options);

    grad_sum_of_squares(tensors, sumsq.as<double>(), stream_.get());
    adamw_step(tensors, step, options, {.max_grad_norm = max_grad_norm, .sum_of_squares = sumsq.as<double>()},
               stream_.get());
    Tensor gpu_sumsq = download(sumsq, {1}, DType::kFloat64);
    EXPECT_NEAR(gpu_sumsq.data<double>()[0], cpu_sumsq, 1e-5 * cpu_sumsq) << "step " << step;
  }
  for (int i = 0; i < count; ++i) {
    const std::string what = "tensor " + std::to_string(i) + " " + param[i].to_string();
    const Shape shape = param[i].shape();
    EXPECT_TRUE(all_close(download(gparam[i], shape, DType::kFloat32), param[i], 1e-5, 1e-6, what + " param"));
    EXPECT_TRUE(all_close(download(gm[i], shape, DType::kFloat32), m[i], 1e-5, 1e-7, what + " m"));
    EXPECT_TRUE(all_close(download(gv[i], shape, DType::kFloat32), v[i], 1e-5, 1e-9, what + " v"));
    // The bf16 copy is the GPU's updated param rounded.
    EXPECT_TRUE(all_close(download(gparam16[i], shape, DType::kBFloat16),
                          to_bf16(download(gparam[i], shape, DType::kFloat32)), 0, 0, what + " param_bf16"));
  }
}

TEST_F(GpuTest, AdamWClippingNeedsTheSumOfSquares) {
  std::vector<AdamWTensor> none;
  EXPECT_THROW(adamw_step(none, 1, AdamWOptions{}, {.max_grad_norm = 1.0, .sum_of_squares = nullptr}, stream_.get()),
               Error);
}

}  // namespace
}  // namespace hspmd::kernels::cuda
