#include "hspmd/kernels/cuda/selfcheck.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "hspmd/core/cuda/cuda_allocator.h"
#include "hspmd/core/cuda/host_copy.h"
#include "hspmd/core/cuda/stream.h"
#include "hspmd/core/random.h"
#include "hspmd/kernels/attention.h"
#include "hspmd/kernels/cast.h"
#include "hspmd/kernels/cross_entropy.h"
#include "hspmd/kernels/cuda/attention.h"
#include "hspmd/kernels/cuda/cross_entropy.h"
#include "hspmd/kernels/cuda/elementwise.h"
#include "hspmd/kernels/cuda/gemm.h"
#include "hspmd/kernels/cuda/rms_norm.h"
#include "hspmd/kernels/elementwise.h"
#include "hspmd/kernels/matmul.h"
#include "hspmd/kernels/rms_norm.h"

namespace hspmd::kernels::cuda {

namespace {

using hspmd::cuda::DeviceBuffer;

// One device's stream, memory and copier for the checks, and conversions between host tensors and device copies.
class Bench {
 public:
  explicit Bench(int device)
      : device_(device),
        stream_(device), memory_({.device = device, .capacity_bytes = 0, .name = ""}), copier_(device, size_t{1} << 20) {}

  DeviceBuffer upload(const Tensor& host) {
    DeviceBuffer d(memory_, host.nbytes(), stream_.get());
    copier_.to_device(host, d.data(), stream_);
    return d;
  }
  DeviceBuffer empty(const Shape& shape, DType dtype) {
    return DeviceBuffer(memory_, static_cast<size_t>(shape.numel()) * dtype_size(dtype), stream_.get());
  }
  Tensor download(const DeviceBuffer& d, const Shape& shape, DType dtype) {
    return copier_.to_host(d.data(), shape, dtype, stream_);
  }
  cudaStream_t stream() const { return stream_.get(); }
  int device() const { return device_; }

 private:
  int device_;
  hspmd::cuda::Stream stream_;
  hspmd::cuda::CudaAllocator memory_;
  hspmd::cuda::HostCopier copier_;
};

Tensor random(const Shape& shape, uint64_t seed, double low = -1.0, double high = 1.0) {
  Tensor t = Tensor::empty(shape, DType::kFloat32);
  fill_uniform(t, seed, low, high);
  return t;
}

Tensor converted(const Tensor& x, DType dtype) {
  Tensor out = Tensor::empty(x.shape(), dtype);
  kernels::cast(x, out);
  return out;
}

// x's values rounded to bfloat16, as float32.
Tensor bf16_values(const Tensor& x) { return converted(converted(x, DType::kBFloat16), DType::kFloat32); }

double relative_error(const Tensor& actual, const Tensor& expected) {
  double diff = 0, scale = 1e-30;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double a = actual.element_as_double(i), e = expected.element_as_double(i);
    diff = std::isnan(a) ? INFINITY : std::max(diff, std::abs(a - e));
    scale = std::max(scale, std::abs(e));
  }
  return diff / scale;
}

constexpr double kFloat32Tolerance = 1e-5, kBFloat16Tolerance = 1e-2;

KernelCheck gemm_bf16(Bench& b) {
  const int64_t m = 67, n = 45, k = 129;
  Tensor x = bf16_values(random({m, k}, 1)), w = bf16_values(random({n, k}, 2));
  Tensor expected = Tensor::empty({m, n}, DType::kFloat32);
  kernels::matmul(x, w, expected, {.trans_a = false, .trans_b = true, .alpha = 1, .beta = 0, .bf16_operands = false});
  auto gx = b.upload(converted(x, DType::kBFloat16)), gw = b.upload(converted(w, DType::kBFloat16));
  auto gy = b.empty({m, n}, DType::kFloat32);
  GemmArgs args;
  args.a = gx.data();
  args.b = gw.data();
  args.out = gy.data();
  args.operands = DType::kBFloat16;
  args.m = m;
  args.n = n;
  args.k = k;
  args.trans_b = true;
  CublasLtGemm gemm(b.device());
  gemm.run(args, b.stream());
  return {"cuBLASLt GEMM, bf16 operands, fp32 accumulation", relative_error(b.download(gy, {m, n}, DType::kFloat32), expected),
          kFloat32Tolerance};
}

KernelCheck rms_norm(Bench& b) {
  const int64_t rows = 37, cols = 301;
  Tensor x = random({rows, cols}, 3), w = random({cols}, 4, 0.5, 1.5);
  Tensor y = Tensor::empty({rows, cols}, DType::kFloat32), rstd = Tensor::empty({rows}, DType::kFloat32);
  kernels::rms_norm_fwd(x, w, 1e-5, y, rstd);
  auto gx = b.upload(x), gw = b.upload(w);
  auto gy = b.empty({rows, cols}, DType::kFloat32), grstd = b.empty({rows}, DType::kFloat32);
  rms_norm_fwd(DType::kFloat32, gx.data(), gw.data(), 1e-5f, gy.data(), grstd.as<float>(), rows, cols, b.stream());
  return {"RMSNorm forward, float32", relative_error(b.download(gy, {rows, cols}, DType::kFloat32), y),
          kFloat32Tolerance};
}

KernelCheck swiglu(Bench& b) {
  const int64_t n = 10007;
  Tensor g = bf16_values(random({n}, 5, -4, 4)), u = bf16_values(random({n}, 6, -4, 4));
  Tensor y = Tensor::empty({n}, DType::kFloat32);
  kernels::swiglu_fwd(g, u, y);
  auto gg = b.upload(converted(g, DType::kBFloat16)), gu = b.upload(converted(u, DType::kBFloat16));
  auto gy = b.empty({n}, DType::kBFloat16);
  swiglu_fwd(DType::kBFloat16, gg.data(), gu.data(), gy.data(), n, b.stream());
  return {"SwiGLU forward, bfloat16", relative_error(converted(b.download(gy, {n}, DType::kBFloat16), DType::kFloat32), y),
          kBFloat16Tolerance};
}

KernelCheck cross_entropy(Bench& b) {
  const int64_t tokens = 19, vocab = 5003;
  Tensor logits = random({tokens, vocab}, 7, -8, 8);
  Tensor targets = Tensor::empty({tokens}, DType::kInt64);
  for (int64_t t = 0; t < tokens; ++t) targets.data<int64_t>()[t] = (t * 7919) % vocab;
  Tensor losses = Tensor::empty({tokens}, DType::kFloat32), lse = losses.clone();
  kernels::cross_entropy_fwd(logits, targets, losses, lse);
  auto gl = b.upload(logits), gt = b.upload(targets);
  auto glosses = b.empty({tokens}, DType::kFloat32), glse = b.empty({tokens}, DType::kFloat32);
  cross_entropy_fwd(DType::kFloat32, gl.data(), DType::kInt64, gt.data(), glosses.as<float>(), glse.as<float>(),
                    {.tokens = tokens, .vocab = vocab, .ignore_index = -100}, b.stream());
  return {"cross-entropy forward, float32", relative_error(b.download(glosses, {tokens}, DType::kFloat32), losses),
          kFloat32Tolerance};
}

KernelCheck attention(Bench& b) {
  const int64_t tokens = 146, nq = 4, nkv = 2, d = 64;
  Tensor cu = Tensor::from_vector<int64_t>({4}, {0, 5, 6, 146});
  Tensor q = random({tokens, nq, d}, 8), k = random({tokens, nkv, d}, 9), v = random({tokens, nkv, d}, 10);
  Tensor out = Tensor::empty(q.shape(), DType::kFloat32), lse = Tensor::empty({nq, tokens}, DType::kFloat32);
  kernels::attention_fwd(q, k, v, cu, out, lse);
  auto gq = b.upload(q), gk = b.upload(k), gv = b.upload(v), gcu = b.upload(cu);
  auto gout = b.empty(q.shape(), DType::kFloat32), glse = b.empty({nq, tokens}, DType::kFloat32);
  attention_fwd(DType::kFloat32, gq.data(), gk.data(), gv.data(), DType::kInt64, gcu.data(), gout.data(),
                glse.as<float>(),
                {.tokens = tokens, .q_heads = nq, .kv_heads = nkv, .head_dim = d, .sequences = 3, .scale = 0.0},
                b.stream());
  return {"attention forward (reference kernel), float32",
          relative_error(b.download(gout, q.shape(), DType::kFloat32), out), kFloat32Tolerance};
}

}  // namespace

std::vector<KernelCheck> check_against_cpu(int device) {
  Bench bench(device);
  std::vector<KernelCheck> checks;
  for (const auto& check : std::vector<std::function<KernelCheck(Bench&)>>{gemm_bf16, rms_norm, swiglu,
                                                                             cross_entropy, attention}) {
    checks.push_back(check(bench));
  }
  return checks;
}

}  // namespace hspmd::kernels::cuda
