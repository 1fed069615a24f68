// Kernel benchmarks at training-like sizes, and a table of ratios measured side by side in one run:
//
//   matmul wrapper / the GEMM library called directly, per size  (goal >= 0.90: it adds nothing)
//   attention fwd+bwd / sgemm 1024^3 rate                          (goal >= 0.70)
//
// FLOP counts: a GEMM is 2 M N K. Causal attention counts only the unmasked half of each
// sequence's S x S score matrix: per (sequence, query head) the forward does 2 products
// (Q K^T, P V) and the backward 5 (Q K^T again, dV, dP, dQ, dK), each of S * S * D / 2
// multiply-adds, so fwd = 2 S^2 D flops, bwd = 5 S^2 D flops, fwd+bwd = 7 S^2 D flops (the
// masked parts of diagonal tiles and the exponentials are work the kernel does but is not credited
// for). RMSNorm reports GB/s: fwd reads x, writes y; bwd reads x, dy, writes dx (5 T H elements;
// the [H] and [T] vectors are ignored). SwiGLU, cross-entropy and AdamW report elements (of gate,
// logits, parameters) per second; run with HSPMD_SIMD=scalar|avx2|avx512 to compare SIMD levels.
//
//   bench_kernels_bench [--threads=N] [google benchmark flags, e.g. --benchmark_filter=attention]
//   bench_kernels_bench --threads=2 --benchmark_repetitions=8 --benchmark_enable_random_interleaving=true
//     (the ratios are then best repetition against best repetition: kernel_bench_support.h)
#include <benchmark/benchmark.h>
#include <cblas.h>  // CBLAS enums; the function is the one the kernels load

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "hspmd/core/random.h"
#include "hspmd/kernels/adamw.h"
#include "hspmd/kernels/attention.h"
#include "hspmd/kernels/blas_library.h"
#include "hspmd/kernels/cross_entropy.h"
#include "hspmd/kernels/elementwise.h"
#include "hspmd/kernels/gemm_backend.h"
#include "hspmd/kernels/matmul.h"
#include "hspmd/kernels/rms_norm.h"
#include "hspmd/kernels/simd.h"
#include "hspmd/kernels/threading.h"

#include "kernel_bench_support.h"

namespace {

using hspmd::DType;
using hspmd::Tensor;

Tensor random(const hspmd::Shape& shape, uint64_t seed, DType dtype = DType::kFloat32) {
  Tensor t = Tensor::empty(shape, dtype);
  hspmd::fill_uniform(t, seed, -1.0, 1.0);
  return t;
}

void set_rate(benchmark::State& state, const char* name, double units_per_iteration) {
  state.counters[name] = benchmark::Counter(units_per_iteration * 1e-9 * static_cast<double>(state.iterations()),
                                            benchmark::Counter::kIsRate);
}

struct GemmSize {
  int64_t m, n, k;
  bool trans_b;
  std::string name() const {
    return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + (trans_b ? "^T" : "");
  }
};

// [4*512, 1024] x [2816, 1024]^T is a Llama MLP up-projection of 4 sequences of 512 tokens.
const GemmSize kGemmSizes[] = {{512, 2048, 512, false}, {1024, 1024, 1024, false}, {2048, 2816, 1024, true}};

void bm_sgemm_direct(benchmark::State& state, GemmSize g) {
  Tensor a = random({g.m, g.k}, 1), b = random(g.trans_b ? hspmd::Shape{g.n, g.k} : hspmd::Shape{g.k, g.n}, 2);
  Tensor c = Tensor::empty({g.m, g.n}, DType::kFloat32);
  for (auto _ : state) {
    // The float32 GEMM library in use, called directly: the figure the matmul wrapper is held to.
    if (hspmd::kernels::float32_gemm() == hspmd::kernels::Float32Gemm::kOneDnn) {
      hspmd::kernels::onednn_sgemm(false, g.trans_b, g.m, g.n, g.k, 1.0f, a.data<float>(), g.k, b.data<float>(),
                                   g.trans_b ? g.k : g.n, 0.0f, c.data<float>(), g.n);
    } else {
      hspmd::kernels::blas_library().sgemm(CblasRowMajor, CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans,
                                           static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k), 1.0f,
                                           a.data<float>(), static_cast<int>(g.k), b.data<float>(),
                                           static_cast<int>(g.trans_b ? g.k : g.n), 0.0f, c.data<float>(),
                                           static_cast<int>(g.n));
    }
    benchmark::DoNotOptimize(c.raw_data());
  }
  set_rate(state, "GFLOP/s", 2.0 * g.m * g.n * g.k);
}

void bm_matmul(benchmark::State& state, GemmSize g) {
  Tensor a = random({g.m, g.k}, 1), b = random(g.trans_b ? hspmd::Shape{g.n, g.k} : hspmd::Shape{g.k, g.n}, 2);
  Tensor c = Tensor::empty({g.m, g.n}, DType::kFloat32);
  for (auto _ : state) {
    hspmd::kernels::matmul(a, b, c, {.trans_b = g.trans_b});
    benchmark::DoNotOptimize(c.raw_data());
  }
  set_rate(state, "GFLOP/s", 2.0 * g.m * g.n * g.k);
}

// 4 packed sequences of 512 tokens, 8 query heads, D = 64, causal.
void bm_attention(benchmark::State& state, int64_t nkv, bool backward) {
  const int64_t nseq = 4, s = 512, nq = 8, d = 64, t = nseq * s;
  Tensor q = random({t, nq, d}, 3), k = random({t, nkv, d}, 4), v = random({t, nkv, d}, 5);
  Tensor cu = Tensor::from_vector<int64_t>({nseq + 1}, {0, s, 2 * s, 3 * s, 4 * s});
  Tensor out = Tensor::empty(q.shape(), DType::kFloat32), lse = Tensor::empty({nq, t}, DType::kFloat32);
  Tensor dout = random(q.shape(), 6), dq = Tensor::empty(q.shape(), DType::kFloat32);
  Tensor dk = Tensor::empty(k.shape(), DType::kFloat32), dv = Tensor::empty(v.shape(), DType::kFloat32);
  for (auto _ : state) {
    hspmd::kernels::attention_fwd(q, k, v, cu, out, lse);
    if (backward) hspmd::kernels::attention_bwd(q, k, v, cu, out, lse, dout, dq, dk, dv);
    benchmark::DoNotOptimize(dq.raw_data());
  }
  set_rate(state, "GFLOP/s", static_cast<double>(backward ? 7 : 2) * nseq * nq * s * s * d);
}

void bm_rms_norm(benchmark::State& state) {
  const int64_t t = 2048, h = 1024;
  Tensor x = random({t, h}, 7), w = random({h}, 8), dy = random({t, h}, 9);
  Tensor y = Tensor::empty({t, h}, DType::kFloat32), rstd = Tensor::empty({t}, DType::kFloat32);
  Tensor dx = Tensor::empty({t, h}, DType::kFloat32), dw = Tensor::empty({h}, DType::kFloat32);
  for (auto _ : state) {
    hspmd::kernels::rms_norm_fwd(x, w, 1e-5, y, rstd);
    hspmd::kernels::rms_norm_bwd(x, w, rstd, dy, dx, dw);
    benchmark::DoNotOptimize(dx.raw_data());
  }
  set_rate(state, "GB/s", 5.0 * t * h * sizeof(float));
}

// SwiGLU fwd+bwd at a Llama MLP's size (4 x 512 tokens, F = 1408): elements per second.
void bm_swiglu(benchmark::State& state) {
  const int64_t t = 2048, f = 1408;
  Tensor g = random({t, f}, 10), u = random({t, f}, 11), dy = random({t, f}, 12);
  Tensor y = Tensor::empty({t, f}, DType::kFloat32), dg = Tensor::empty({t, f}, DType::kFloat32);
  Tensor du = Tensor::empty({t, f}, DType::kFloat32);
  for (auto _ : state) {
    hspmd::kernels::swiglu_fwd(g, u, y);
    hspmd::kernels::swiglu_bwd(g, u, dy, dg, du);
    benchmark::DoNotOptimize(du.raw_data());
  }
  set_rate(state, "Gelem/s", static_cast<double>(t * f));
}

// Cross-entropy fwd+bwd over [2048, 32000] logits (a 32k vocabulary): logits per second.
void bm_cross_entropy(benchmark::State& state) {
  const int64_t t = 2048, v = 32000;
  Tensor logits = random({t, v}, 13), dlogits = Tensor::empty({t, v}, DType::kFloat32);
  std::vector<int64_t> ids(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) ids[i] = (i * 7919) % v;
  Tensor targets = Tensor::from_vector<int64_t>({t}, ids);
  Tensor losses = Tensor::empty({t}, DType::kFloat32), lse = Tensor::empty({t}, DType::kFloat32);
  Tensor dlosses = random({t}, 14);
  for (auto _ : state) {
    hspmd::kernels::cross_entropy_fwd(logits, targets, losses, lse);
    hspmd::kernels::cross_entropy_bwd(logits, targets, lse, dlosses, dlogits);
    benchmark::DoNotOptimize(dlogits.raw_data());
  }
  set_rate(state, "Gelem/s", static_cast<double>(t * v));
}

// One AdamW step over 16M parameters: parameters per second.
void bm_adamw(benchmark::State& state) {
  const int64_t n = 16 << 20;
  Tensor p = random({n}, 15), g = random({n}, 16), m = random({n}, 17), v = Tensor::zeros({n}, DType::kFloat32);
  int64_t step = 0;
  for (auto _ : state) {
    hspmd::kernels::adamw_step(p, g, m, v, ++step, {.lr = 1e-4, .weight_decay = 0.1});
    benchmark::DoNotOptimize(p.raw_data());
  }
  set_rate(state, "Gelem/s", static_cast<double>(n));
}

using Best = std::map<std::string, std::map<std::string, double>>;

// The best GFLOP/s of a registered benchmark (all run with UseRealTime, which suffixes the name);
// 0 when it was filtered out.
double best_rate(const Best& best, const std::string& name) {
  auto it = best.find(name + "/real_time");
  if (it == best.end()) return 0;
  auto rate = it->second.find("GFLOP/s");
  return rate == it->second.end() ? 0 : rate->second;
}

void print_ratio(const Best& best, const std::string& what, const std::string& num, const std::string& den,
                 double goal) {
  const double n = best_rate(best, num), d = best_rate(best, den);
  if (n <= 0 || d <= 0) return;  // filtered out
  const double r = n / d;
  std::printf("%-44s %8.1f / %8.1f = %5.2f  (goal >= %.2f) %s\n", what.c_str(), n, d, r, goal,
              r >= goal ? "ok" : "BELOW GOAL");
}

}  // namespace

int main(int argc, char** argv) {
  // --threads=N (ours) is removed before Google Benchmark parses the rest.
  if (!hspmd::bench::init_benchmark_with_threads(argc, argv)) return 1;

  for (const GemmSize& g : kGemmSizes) {
    benchmark::RegisterBenchmark(("sgemm_direct/" + g.name()).c_str(), bm_sgemm_direct, g)->UseRealTime();
    benchmark::RegisterBenchmark(("matmul/" + g.name()).c_str(), bm_matmul, g)->UseRealTime();
  }
  for (int64_t nkv : {4, 8}) {
    const std::string shape = "/seq4x512_nq8_nkv" + std::to_string(nkv) + "_d64";
    benchmark::RegisterBenchmark(("attention_fwd" + shape).c_str(), bm_attention, nkv, false)->UseRealTime();
    benchmark::RegisterBenchmark(("attention_fwd_bwd" + shape).c_str(), bm_attention, nkv, true)->UseRealTime();
  }
  benchmark::RegisterBenchmark("rms_norm_fwd_bwd/2048x1024", bm_rms_norm)->UseRealTime();
  benchmark::RegisterBenchmark("swiglu_fwd_bwd/2048x1408", bm_swiglu)->UseRealTime();
  benchmark::RegisterBenchmark("cross_entropy_fwd_bwd/2048x32000", bm_cross_entropy)->UseRealTime();
  benchmark::RegisterBenchmark("adamw/16M", bm_adamw)->UseRealTime();

  hspmd::bench::BestCounterReporter reporter;
  std::printf("kernel threads: %d\nGEMM: %s\nSIMD level: %s (HSPMD_SIMD forces one)\n", hspmd::kernels::num_threads(),
              hspmd::kernels::gemm_backend_description().c_str(),
              hspmd::kernels::simd_level_name(hspmd::kernels::simd_level()));
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  const Best& best = reporter.best();
  std::printf("\nratios measured in this run (%d threads; best repetition of each)\n", hspmd::kernels::num_threads());
  for (const GemmSize& g : kGemmSizes) {
    print_ratio(best, "matmul wrapper / direct sgemm " + g.name(), "matmul/" + g.name(), "sgemm_direct/" + g.name(),
                0.90);
  }
  const std::string sgemm = "sgemm_direct/1024x1024x1024";
  for (const char* nkv : {"4", "8"}) {
    print_ratio(best, std::string("attention fwd+bwd nkv") + nkv + " / sgemm 1024^3",
                std::string("attention_fwd_bwd/seq4x512_nq8_nkv") + nkv + "_d64", sgemm, 0.7);
  }
  return 0;
}
