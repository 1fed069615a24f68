// The CUDA backend's speed on one GPU: cuBLASLt GEMM rates (bf16 with fp32 accumulation, fp32,
// TF32) at 4096^3 and at the GEMM shapes of a 1.1B Llama (hidden 2048, 32 heads of 64 with 4 KV
// heads, FFN 5632, vocabulary 32000) for 4096 tokens, and the memory-bound kernels' bandwidth
// (RMSNorm, SwiGLU, cross-entropy, multi-tensor AdamW), and causal attention's rate with the flash
// kernel and with the reference one (the Llama's 32 heads of 64, 4 KV heads, one sequence of 4096
// bf16 tokens). Times come from CUDA events around each
// batch of calls (Google Benchmark's manual time). Without a CUDA device it prints
// "SKIPPED: no CUDA device" and exits 77 (scripts/gpu-check.sh runs it after the GPU tests).
//
//   build/release/bench_cuda_kernels_bench --benchmark_min_time=0.2s
#include <benchmark/benchmark.h>

#include <cstdio>

#if defined(HSPMD_CUDA)

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

#include "hspmd/core/cuda/cuda_allocator.h"
#include "hspmd/core/cuda/cuda_error.h"
#include "hspmd/core/cuda/stream.h"
#include "hspmd/kernels/cuda/adamw.h"
#include "hspmd/kernels/cuda/attention_choice.h"
#include "hspmd/kernels/cuda/attention.h"
#include "hspmd/kernels/cuda/cross_entropy.h"
#include "hspmd/kernels/cuda/elementwise.h"
#include "hspmd/kernels/cuda/flash_attention.h"
#include "hspmd/kernels/cuda/gemm.h"
#include "hspmd/kernels/cuda/rms_norm.h"

namespace hspmd::bench {
namespace {

namespace kc = hspmd::kernels::cuda;
using kc::CudaAttentionKernel;

// One device, stream, allocator and cuBLASLt handle for every benchmark of the program.
struct Gpu {
  cuda::Stream stream{0};
  cuda::CudaAllocator memory{{.device = 0, .capacity_bytes = 0, .name = ""}};
  kc::CublasLtGemm gemm{0};
  cuda::Event start{0}, stop{0};
};
Gpu& gpu() {
  static Gpu g;
  return g;
}

// Times `calls` runs of fn per iteration with CUDA events; `bytes_or_flops` per run becomes the
// counter `counter` as a rate.
void time_on_gpu(benchmark::State& state, const std::function<void()>& fn, double per_call, const char* counter,
                 int calls = 10) {
  Gpu& g = gpu();
  fn();  // warm-up: cuBLASLt's heuristic, the allocator's first blocks
  g.stream.synchronize();
  for (auto _ : state) {
    g.start.record(g.stream);
    for (int i = 0; i < calls; ++i) fn();
    g.stop.record(g.stream);
    g.stop.synchronize();
    float ms = 0;
    HSPMD_CUDA_CHECK(cudaEventElapsedTime(&ms, g.start.get(), g.stop.get()));
    state.SetIterationTime(ms / 1e3 / calls);
  }
  state.counters[counter] = benchmark::Counter(per_call, benchmark::Counter::kIsIterationInvariantRate);
}

void gemm(benchmark::State& state, DType operands, DType out, bool tf32) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  Gpu& g = gpu();
  const size_t in = dtype_size(operands), o = dtype_size(out);
  cuda::DeviceBuffer a(g.memory, m * k * in, g.stream.get()), b(g.memory, n * k * in, g.stream.get()),
      c(g.memory, m * n * o, g.stream.get());
  HSPMD_CUDA_CHECK(cudaMemsetAsync(a.data(), 0, a.bytes(), g.stream.get()));
  HSPMD_CUDA_CHECK(cudaMemsetAsync(b.data(), 0, b.bytes(), g.stream.get()));
  kc::GemmArgs args;
  args.a = a.data();
  args.b = b.data();
  args.out = c.data();
  args.operands = operands;
  args.out_dtype = out;
  args.m = m;
  args.n = n;
  args.k = k;
  args.trans_b = true;  // y = x W^T, the linear layers' product
  args.allow_tf32 = tf32;
  time_on_gpu(state, [&] { g.gemm.run(args, g.stream.get()); }, 2.0 * m * n * k, "FLOP/s");
}

// 4096^3, then the linear layers of the 1.1B Llama for 4096 tokens (m, n, k): QKV (2048 + 2 x 256
// columns), attention out, gate and up fused (2 x 5632), down, lm head.
#define LLAMA_SHAPES                                                                                  \
  Args({4096, 4096, 4096})->Args({4096, 2560, 2048})->Args({4096, 2048, 2048})->Args({4096, 11264, 2048}) \
      ->Args({4096, 2048, 5632})->Args({4096, 32000, 2048})

BENCHMARK_CAPTURE(gemm, bf16, DType::kBFloat16, DType::kBFloat16, false)->LLAMA_SHAPES->UseManualTime();
BENCHMARK_CAPTURE(gemm, bf16_fp32_out, DType::kBFloat16, DType::kFloat32, false)->Args({4096, 4096, 4096})->UseManualTime();
BENCHMARK_CAPTURE(gemm, fp32, DType::kFloat32, DType::kFloat32, false)->Args({4096, 4096, 4096})->UseManualTime();
BENCHMARK_CAPTURE(gemm, tf32, DType::kFloat32, DType::kFloat32, true)->Args({4096, 4096, 4096})->UseManualTime();

void rms_norm_fwd(benchmark::State& state) {
  const int64_t rows = 16384, cols = 2048;
  Gpu& g = gpu();
  cuda::DeviceBuffer x(g.memory, rows * cols * 2, g.stream.get()), y(g.memory, rows * cols * 2, g.stream.get()),
      w(g.memory, cols * 2, g.stream.get()), rstd(g.memory, rows * 4, g.stream.get());
  HSPMD_CUDA_CHECK(cudaMemsetAsync(x.data(), 0, x.bytes(), g.stream.get()));
  HSPMD_CUDA_CHECK(cudaMemsetAsync(w.data(), 0, w.bytes(), g.stream.get()));
  time_on_gpu(
      state,
      [&] { kc::rms_norm_fwd(DType::kBFloat16, x.data(), w.data(), 1e-5f, y.data(), rstd.as<float>(), rows, cols, g.stream.get()); },
      2.0 * rows * cols * 2, "bytes/s");
}
BENCHMARK(rms_norm_fwd)->UseManualTime();

void swiglu_fwd(benchmark::State& state) {
  const int64_t n = int64_t{16384} * 5632;
  Gpu& g = gpu();
  cuda::DeviceBuffer gate(g.memory, n * 2, g.stream.get()), up(g.memory, n * 2, g.stream.get()),
      y(g.memory, n * 2, g.stream.get());
  HSPMD_CUDA_CHECK(cudaMemsetAsync(gate.data(), 0, gate.bytes(), g.stream.get()));
  HSPMD_CUDA_CHECK(cudaMemsetAsync(up.data(), 0, up.bytes(), g.stream.get()));
  time_on_gpu(
      state, [&] { kc::swiglu_fwd(DType::kBFloat16, gate.data(), up.data(), y.data(), n, g.stream.get()); },
      3.0 * n * 2, "bytes/s");
}
BENCHMARK(swiglu_fwd)->UseManualTime();

void cross_entropy_fwd(benchmark::State& state) {
  const int64_t tokens = 4096, vocab = 32000;
  Gpu& g = gpu();
  cuda::DeviceBuffer logits(g.memory, tokens * vocab * 2, g.stream.get()), targets(g.memory, tokens * 8, g.stream.get()),
      losses(g.memory, tokens * 4, g.stream.get()), lse(g.memory, tokens * 4, g.stream.get());
  HSPMD_CUDA_CHECK(cudaMemsetAsync(logits.data(), 0, logits.bytes(), g.stream.get()));
  HSPMD_CUDA_CHECK(cudaMemsetAsync(targets.data(), 0, targets.bytes(), g.stream.get()));
  const kc::CrossEntropyShape shape{.tokens = tokens, .vocab = vocab, .ignore_index = -100};
  time_on_gpu(
      state,
      [&] {
        kc::cross_entropy_fwd(DType::kBFloat16, logits.data(), DType::kInt64, targets.data(), losses.as<float>(),
                              lse.as<float>(), shape, g.stream.get());
      },
      // The kernel reads each row twice (max, then the sum); the second read mostly hits L2.
      1.0 * tokens * vocab * 2, "bytes/s");
}
BENCHMARK(cross_entropy_fwd)->UseManualTime();

void adamw_multi_tensor(benchmark::State& state) {
  // 64 tensors of 4M parameters (256M). Per parameter: the norm reads grad (4 bytes); the step reads
  // param, grad, m, v (16) and writes param, m, v (12) and the bf16 copy (2).
  const int tensors = 64;
  const int64_t n = int64_t{4} << 20;
  Gpu& g = gpu();
  std::vector<cuda::DeviceBuffer> buffers;
  std::vector<kc::AdamWTensor> list;
  for (int i = 0; i < tensors; ++i) {
    kc::AdamWTensor t;
    for (float** p : {&t.param, &t.m, &t.v}) {
      buffers.emplace_back(g.memory, n * 4, g.stream.get());
      HSPMD_CUDA_CHECK(cudaMemsetAsync(buffers.back().data(), 0, n * 4, g.stream.get()));
      *p = buffers.back().as<float>();
    }
    buffers.emplace_back(g.memory, n * 4, g.stream.get());
    HSPMD_CUDA_CHECK(cudaMemsetAsync(buffers.back().data(), 0, n * 4, g.stream.get()));
    t.grad = buffers.back().as<float>();
    buffers.emplace_back(g.memory, n * 2, g.stream.get());
    t.param_bf16 = buffers.back().as<__nv_bfloat16>();
    t.numel = n;
    list.push_back(t);
  }
  cuda::DeviceBuffer sumsq(g.memory, sizeof(double), g.stream.get());
  kernels::AdamWOptions options;
  int64_t step = 0;
  time_on_gpu(
      state,
      [&] {
        kc::grad_sum_of_squares(list, sumsq.as<double>(), g.stream.get());
        kc::adamw_step(list, ++step, options, {.max_grad_norm = 1.0, .sum_of_squares = sumsq.as<double>()},
                       g.stream.get());
      },
      (4.0 + 4 * 4 + 3 * 4 + 2) * tensors * n, "bytes/s");
}
BENCHMARK(adamw_multi_tensor)->UseManualTime();

enum class AttentionPass { kForward, kBackward };

// Causal attention over one sequence of 4096 tokens, 32 query heads and 4 KV heads of 64, bf16,
// zeros in (the rate does not depend on the values). FLOPs: Q K^T and P V over the lower triangle,
// 2 x 2 x T^2 / 2 x heads x head_dim forward; the backward's five products 2.5 times that.
void attention(benchmark::State& state, CudaAttentionKernel kernel, AttentionPass pass) {
  const int64_t tokens = 4096, q_heads = 32, kv_heads = 4, head_dim = 64;
  Gpu& g = gpu();
  const kc::AttentionShape shape{.tokens = tokens, .q_heads = q_heads, .kv_heads = kv_heads, .head_dim = head_dim,
                                 .sequences = 1, .scale = 0.0, .window = 0};
  const int64_t q_elements = tokens * q_heads * head_dim, kv_elements = tokens * kv_heads * head_dim;
  std::vector<cuda::DeviceBuffer> zeros;
  auto buffer = [&](int64_t bytes) -> void* {
    zeros.emplace_back(g.memory, bytes, g.stream.get());
    HSPMD_CUDA_CHECK(cudaMemsetAsync(zeros.back().data(), 0, bytes, g.stream.get()));
    return zeros.back().data();
  };
  void *q = buffer(q_elements * 2), *k = buffer(kv_elements * 2), *v = buffer(kv_elements * 2),
       *out = buffer(q_elements * 2), *dout = buffer(q_elements * 2);
  auto* lse = static_cast<float*>(buffer(q_heads * tokens * 4));
  auto *dq = static_cast<float*>(buffer(q_elements * 4)), *dk = static_cast<float*>(buffer(kv_elements * 4)),
       *dv = static_cast<float*>(buffer(kv_elements * 4));
  const int32_t offsets[2] = {0, static_cast<int32_t>(tokens)};
  void* cu = buffer(sizeof(offsets));
  HSPMD_CUDA_CHECK(cudaMemcpyAsync(cu, offsets, sizeof(offsets), cudaMemcpyHostToDevice, g.stream.get()));
  const bool flash = kernel == CudaAttentionKernel::kFlash;
  const double forward_flops = 2.0 * tokens * tokens * q_heads * head_dim;
  std::function<void()> run = [&] {
    if (flash) {
      kc::flash_attention_fwd(q, k, v, DType::kInt32, cu, out, lse, shape, g.stream.get());
    } else {
      kc::reference_attention_fwd(DType::kBFloat16, q, k, v, DType::kInt32, cu, out, lse, shape, g.stream.get());
    }
  };
  if (pass == AttentionPass::kBackward) {
    run();  // out and lse for the backward
    run = [&] {
      if (flash) {
        kc::flash_attention_bwd(q, k, v, DType::kInt32, cu, out, lse, dout, dq, dk, dv, shape, g.stream.get());
      } else {
        kc::reference_attention_bwd(DType::kBFloat16, q, k, v, DType::kInt32, cu, out, lse, dout, dq, dk, dv, shape,
                                    g.stream.get());
      }
    };
  }
  // One call per iteration: the reference backward takes long at this size.
  time_on_gpu(state, run, pass == AttentionPass::kForward ? forward_flops : 2.5 * forward_flops, "FLOP/s", 1);
}
BENCHMARK_CAPTURE(attention, flash_fwd, CudaAttentionKernel::kFlash, AttentionPass::kForward)
    ->Iterations(3)->UseManualTime();
BENCHMARK_CAPTURE(attention, reference_fwd, CudaAttentionKernel::kReference, AttentionPass::kForward)
    ->Iterations(3)->UseManualTime();
BENCHMARK_CAPTURE(attention, flash_bwd, CudaAttentionKernel::kFlash, AttentionPass::kBackward)
    ->Iterations(3)->UseManualTime();
BENCHMARK_CAPTURE(attention, reference_bwd, CudaAttentionKernel::kReference, AttentionPass::kBackward)
    ->Iterations(3)->UseManualTime();

}  // namespace
}  // namespace hspmd::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (hspmd::cuda::device_count() == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

#else

int main() {
  std::printf("SKIPPED: hspmd was built without HSPMD_CUDA\n");
  return 77;
}

#endif
