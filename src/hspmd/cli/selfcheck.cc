// `hspmd selfcheck`: checks every CPU kernel family against a small reference on random inputs
// (forward against a plain loop in double, backward against central finite differences in
// float64), prints PASS/FAIL per kernel, with a GPU the CUDA kernels against the CPU ones
// (kernels/cuda/selfcheck.h), then a short micro-benchmark table. Exits non-zero when a
// check fails. The interim demo until training lands; it runs in a few seconds.
//
//   hspmd selfcheck                 # all cores
//   hspmd selfcheck --threads 1 --quick
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "hspmd/core/error.h"
#include "hspmd/core/random.h"
#include "hspmd/kernels/attention.h"
#include "hspmd/kernels/gemm_backend.h"
#include "hspmd/kernels/cross_entropy.h"
#include "hspmd/kernels/matmul.h"
#include "hspmd/kernels/rms_norm.h"
#include "hspmd/kernels/simd.h"
#include "hspmd/kernels/softmax.h"
#include "hspmd/kernels/threading.h"
#if defined(HSPMD_CUDA)
#include "hspmd/core/cuda/cuda_error.h"
#include "hspmd/kernels/cuda/selfcheck.h"
#endif

namespace hspmd::cli {
namespace {

using kernels::AttentionOptions;

Tensor rand_tensor(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  fill_uniform(t, seed, -1.0, 1.0);
  return t;
}

Tensor zeros64(const Shape& shape) { return Tensor::zeros(shape, DType::kFloat64); }

double at(const Tensor& t, int64_t i) { return t.element_as_double(i); }

// max |actual - expected| / max |expected|: one scale-aware error per tensor.
double rel_error(const Tensor& actual, const Tensor& expected) {
  double diff = 0, scale = 1e-30;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    diff = std::max(diff, std::abs(at(actual, i) - at(expected, i)));
    scale = std::max(scale, std::abs(at(expected, i)));
  }
  return diff / scale;
}

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += at(a, i) * at(b, i);
  return s;
}

// d loss / d x (x float64) by central differences.
Tensor numeric_grad(const std::function<double()>& loss, const Tensor& x) {
  Tensor g = zeros64(x.shape());
  double* p = x.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double saved = p[i], eps = 1e-6;
    p[i] = saved + eps;
    const double plus = loss();
    p[i] = saved - eps;
    const double minus = loss();
    p[i] = saved;
    g.data<double>()[i] = (plus - minus) / (2 * eps);
  }
  return g;
}

struct Check {
  std::string name;
  double error, tolerance;
  bool pass() const { return error <= tolerance; }  // false for NaN
};

// --- forward checks against plain loops ---------------------------------------------------------

Check check_matmul(DType dtype, double tolerance) {
  const int64_t m = 33, n = 47, k = 29;
  Tensor a = rand_tensor({3, m, k}, dtype, 1), b = rand_tensor({n, k}, dtype, 2);
  Tensor out = Tensor::empty({3, m, n}, dtype), ref = zeros64({3, m, n});
  kernels::matmul(a, b, out, {.trans_b = true});
  for (int64_t i = 0; i < 3 * m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += at(a, i * k + p) * at(b, j * k + p);
      ref.data<double>()[i * n + j] = s;
    }
  }
  return {"matmul " + std::string(dtype_name(dtype)) + " [3,33,29] x [47,29]^T", rel_error(out, ref), tolerance};
}

struct Attn {
  Tensor q, k, v, cu;
};

Attn make_attention(const std::vector<int64_t>& lens, int64_t nq, int64_t nkv, int64_t d, DType dtype) {
  std::vector<int64_t> cu{0};
  for (int64_t len : lens) cu.push_back(cu.back() + len);
  const int64_t t = cu.back();
  return {rand_tensor({t, nq, d}, dtype, 3), rand_tensor({t, nkv, d}, dtype, 4), rand_tensor({t, nkv, d}, dtype, 5),
          Tensor::from_vector<int64_t>({static_cast<int64_t>(cu.size())}, cu)};
}

// Naive causal attention, one full score row per query token.
Tensor attention_reference(const Attn& x) {
  const int64_t nq = x.q.dim(1), nkv = x.k.dim(1), d = x.q.dim(2), group = nq / nkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Tensor out = zeros64(x.q.shape());
  for (int64_t s = 0; s + 1 < x.cu.numel(); ++s) {
    const int64_t start = x.cu.data<int64_t>()[s], end = x.cu.data<int64_t>()[s + 1];
    for (int64_t t = start; t < end; ++t) {
      for (int64_t h = 0; h < nq; ++h) {
        std::vector<double> p;
        for (int64_t u = start; u <= t; ++u) {
          double z = 0;
          for (int64_t c = 0; c < d; ++c) z += at(x.q, (t * nq + h) * d + c) * at(x.k, (u * nkv + h / group) * d + c);
          p.push_back(z * scale);
        }
        const double m = *std::max_element(p.begin(), p.end());
        double l = 0;
        for (double& z : p) l += (z = std::exp(z - m));
        for (int64_t u = start; u <= t; ++u) {
          for (int64_t c = 0; c < d; ++c) {
            out.data<double>()[(t * nq + h) * d + c] += p[u - start] / l * at(x.v, (u * nkv + h / group) * d + c);
          }
        }
      }
    }
  }
  return out;
}

Check check_attention_fwd() {
  Attn x = make_attention({70, 5, 1}, 4, 2, 16, DType::kFloat32);
  Tensor out = Tensor::empty(x.q.shape(), DType::kFloat32), lse = Tensor::empty({4, 76}, DType::kFloat32);
  kernels::attention_fwd(x.q, x.k, x.v, x.cu, out, lse);
  return {"attention_fwd float32 causal varlen GQA [76,4|2,16]", rel_error(out, attention_reference(x)), 2e-5};
}

Check check_rms_norm_fwd() {
  Tensor x = rand_tensor({13, 37}, DType::kFloat32, 6), w = rand_tensor({37}, DType::kFloat32, 7);
  Tensor y = Tensor::empty({13, 37}, DType::kFloat32), rstd = Tensor::empty({13}, DType::kFloat32);
  kernels::rms_norm_fwd(x, w, 1e-5, y, rstd);
  Tensor ref = zeros64({13, 37});
  for (int64_t t = 0; t < 13; ++t) {
    double ms = 0;
    for (int64_t c = 0; c < 37; ++c) ms += at(x, t * 37 + c) * at(x, t * 37 + c) / 37;
    for (int64_t c = 0; c < 37; ++c) ref.data<double>()[t * 37 + c] = at(x, t * 37 + c) / std::sqrt(ms + 1e-5) * at(w, c);
  }
  return {"rms_norm_fwd float32 [13,37]", rel_error(y, ref), 1e-5};
}

Check check_softmax_fwd() {
  Tensor x = rand_tensor({11, 29}, DType::kFloat32, 8), y = Tensor::empty({11, 29}, DType::kFloat32);
  kernels::softmax_fwd(x, y);
  Tensor ref = zeros64({11, 29});
  for (int64_t r = 0; r < 11; ++r) {
    double l = 0;
    for (int64_t c = 0; c < 29; ++c) l += std::exp(at(x, r * 29 + c));
    for (int64_t c = 0; c < 29; ++c) ref.data<double>()[r * 29 + c] = std::exp(at(x, r * 29 + c)) / l;
  }
  return {"softmax_fwd float32 [11,29]", rel_error(y, ref), 1e-5};
}

Tensor targets_for(int64_t t, int64_t v) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < t; ++i) ids.push_back(i == 2 ? -100 : (i * 7 + 3) % v);  // one ignored token
  return Tensor::from_vector<int64_t>({t}, ids);
}

Check check_cross_entropy_fwd() {
  const int64_t t = 9, v = 31;
  Tensor logits = rand_tensor({t, v}, DType::kFloat32, 9), targets = targets_for(t, v);
  Tensor losses = Tensor::empty({t}, DType::kFloat32), lse = Tensor::empty({t}, DType::kFloat32);
  kernels::cross_entropy_fwd(logits, targets, losses, lse);
  Tensor ref = zeros64({t});
  for (int64_t i = 0; i < t; ++i) {
    const int64_t target = targets.data<int64_t>()[i];
    if (target < 0) continue;
    double l = 0;
    for (int64_t c = 0; c < v; ++c) l += std::exp(at(logits, i * v + c));
    ref.data<double>()[i] = std::log(l) - at(logits, i * v + target);
  }
  return {"cross_entropy_fwd float32 [9,31] with ignore_index", rel_error(losses, ref), 1e-5};
}

// --- backward checks against finite differences (float64), loss = sum(output * w) ---------------

Check gradient_check(const std::string& name, const std::vector<std::pair<Tensor, Tensor>>& analytic_and_input,
                     const std::function<double()>& loss) {
  double worst = 0;
  for (const auto& [analytic, input] : analytic_and_input) {
    worst = std::max(worst, rel_error(analytic, numeric_grad(loss, input)));
  }
  return {name, worst, 1e-6};
}

Check check_attention_bwd() {
  Attn x = make_attention({6, 1, 4}, 2, 1, 4, DType::kFloat64);
  const int64_t t = x.q.dim(0);
  Tensor w = rand_tensor(x.q.shape(), DType::kFloat64, 10);
  Tensor out = Tensor::empty(x.q.shape(), DType::kFloat64), lse = Tensor::empty({2, t}, DType::kFloat64);
  auto loss = [&] {
    kernels::attention_fwd(x.q, x.k, x.v, x.cu, out, lse);
    return dot(out, w);
  };
  loss();
  Tensor dq = Tensor::empty(x.q.shape(), DType::kFloat64), dk = Tensor::empty(x.k.shape(), DType::kFloat64);
  Tensor dv = Tensor::empty(x.v.shape(), DType::kFloat64);
  kernels::attention_bwd(x.q, x.k, x.v, x.cu, out, lse, w, dq, dk, dv);
  return gradient_check("attention_bwd float64 vs finite differences", {{dq, x.q}, {dk, x.k}, {dv, x.v}}, loss);
}

Check check_rms_norm_bwd() {
  Tensor x = rand_tensor({5, 7}, DType::kFloat64, 11), wt = rand_tensor({7}, DType::kFloat64, 12);
  Tensor w = rand_tensor({5, 7}, DType::kFloat64, 13);
  Tensor y = Tensor::empty({5, 7}, DType::kFloat64), rstd = Tensor::empty({5}, DType::kFloat64);
  auto loss = [&] {
    kernels::rms_norm_fwd(x, wt, 1e-5, y, rstd);
    return dot(y, w);
  };
  loss();
  Tensor dx = Tensor::empty({5, 7}, DType::kFloat64), dwt = Tensor::empty({7}, DType::kFloat64);
  kernels::rms_norm_bwd(x, wt, rstd, w, dx, dwt);
  return gradient_check("rms_norm_bwd float64 vs finite differences", {{dx, x}, {dwt, wt}}, loss);
}

Check check_softmax_bwd() {
  Tensor x = rand_tensor({4, 9}, DType::kFloat64, 14), w = rand_tensor({4, 9}, DType::kFloat64, 15);
  Tensor y = Tensor::empty({4, 9}, DType::kFloat64);
  auto loss = [&] {
    kernels::softmax_fwd(x, y);
    return dot(y, w);
  };
  loss();
  Tensor dx = Tensor::empty({4, 9}, DType::kFloat64);
  kernels::softmax_bwd(y, w, dx);
  return gradient_check("softmax_bwd float64 vs finite differences", {{dx, x}}, loss);
}

Check check_cross_entropy_bwd() {
  const int64_t t = 6, v = 11;
  Tensor logits = rand_tensor({t, v}, DType::kFloat64, 16), targets = targets_for(t, v);
  Tensor w = rand_tensor({t}, DType::kFloat64, 17);
  Tensor losses = Tensor::empty({t}, DType::kFloat64), lse = Tensor::empty({t}, DType::kFloat64);
  auto loss = [&] {
    kernels::cross_entropy_fwd(logits, targets, losses, lse);
    return dot(losses, w);
  };
  loss();
  Tensor dlogits = Tensor::empty({t, v}, DType::kFloat64);
  kernels::cross_entropy_bwd(logits, targets, lse, w, dlogits);
  return gradient_check("cross_entropy_bwd float64 vs finite differences", {{dlogits, logits}}, loss);
}

// --- micro-benchmark ------------------------------------------------------------------------------

// Seconds per call of fn after one warm-up call: the best of 5 windows of at least min_seconds
// each. A disturbance that passes (a shared host's neighbours; OpenBLAS's threads, which spin for
// about 0.1 s after they start, when a linked library loaded it at startup) spoils a window, not
// the figure (docs/cpu-kernels.md, "GEMM").
double seconds_per_call(const std::function<void()>& fn, double min_seconds) {
  fn();
  using Clock = std::chrono::steady_clock;
  double best = std::numeric_limits<double>::infinity();
  for (int window = 0; window < 5; ++window) {
    const auto start = Clock::now();
    int calls = 0;
    double elapsed = 0;
    do {
      fn();
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < min_seconds);
    best = std::min(best, elapsed / calls);
  }
  return best;
}

void micro_benchmark(bool quick) {
  const double min_seconds = quick ? 0.05 : 0.3;
  const int64_t n = quick ? 256 : 512, s = quick ? 256 : 512, nseq = 2, nq = 8, nkv = 4, d = 64;
  Tensor a = rand_tensor({n, n}, DType::kFloat32, 20), b = rand_tensor({n, n}, DType::kFloat32, 21);
  Tensor c = Tensor::empty({n, n}, DType::kFloat32);
  const double matmul_rate = 2.0 * n * n * n / seconds_per_call([&] { kernels::matmul(a, b, c); }, min_seconds) / 1e9;

  Attn x = make_attention(std::vector<int64_t>(nseq, s), nq, nkv, d, DType::kFloat32);
  const int64_t t = nseq * s;
  Tensor out = Tensor::empty(x.q.shape(), DType::kFloat32), lse = Tensor::empty({nq, t}, DType::kFloat32);
  Tensor dq = Tensor::empty(x.q.shape(), DType::kFloat32), dk = Tensor::empty(x.k.shape(), DType::kFloat32);
  Tensor dv = Tensor::empty(x.v.shape(), DType::kFloat32);
  // Causal attention is credited with half of the S x S x D products: fwd 2, bwd 5 of them.
  const double flops = 7.0 * nseq * nq * s * s * d;
  const double attention_rate = flops / seconds_per_call([&] {
                                  kernels::attention_fwd(x.q, x.k, x.v, x.cu, out, lse);
                                  kernels::attention_bwd(x.q, x.k, x.v, x.cu, out, lse, out, dq, dk, dv);
                                }, min_seconds) / 1e9;

  std::printf("\nmicro-benchmark (%d threads, float32)\n", kernels::num_threads());
  std::printf("  %-52s %8.1f GFLOP/s\n", ("matmul " + std::to_string(n) + "^3").c_str(), matmul_rate);
  std::printf("  %-52s %8.1f GFLOP/s  (%.2f of matmul)\n",
              ("attention fwd+bwd causal " + std::to_string(nseq) + "x" + std::to_string(s) + " tokens, 8|4 heads, D 64")
                  .c_str(),
              attention_rate, attention_rate / matmul_rate);
}

// The CUDA kernels against the CPU ones on device 0, when hspmd has the CUDA backend and sees a
// GPU; the number that failed.
int check_cuda_kernels() {
#if defined(HSPMD_CUDA)
  if (cuda::device_count() == 0) {
    std::printf("\nCUDA kernels: not checked (no CUDA device visible)\n");
    return 0;
  }
  std::printf("\nCUDA kernels against the CPU kernels (cuda:0)\n");
  int failed = 0;
  for (const kernels::cuda::KernelCheck& c : kernels::cuda::check_against_cpu(0)) {
    failed += c.pass() ? 0 : 1;
    std::printf("  %s  %-54s max rel err %.1e (tol %.0e)\n", c.pass() ? "PASS" : "FAIL", c.name.c_str(), c.error,
                c.tolerance);
  }
  return failed;
#else
  std::printf("\nCUDA kernels: not checked (hspmd was built without HSPMD_CUDA)\n");
  return 0;
#endif
}

void run_selfcheck(int threads, bool quick) {
  if (threads > 0) kernels::set_num_threads(threads);
  std::printf("hspmd selfcheck: CPU kernels against references (%d threads)\n", kernels::num_threads());
  std::printf("GEMM: %s\n", kernels::gemm_backend_description().c_str());
  std::printf("SIMD level: %s (best on this CPU: %s; HSPMD_SIMD forces one)\n",
              kernels::simd_level_name(kernels::simd_level()), kernels::simd_level_name(kernels::best_simd_level()));
  const std::vector<std::function<Check()>> checks = {
      [] { return check_matmul(DType::kFloat32, 1e-5); },
      [] { return check_matmul(DType::kFloat64, 1e-12); },
      [] { return check_matmul(DType::kBFloat16, 1.0 / 128); },
      check_attention_fwd,
      check_attention_bwd,
      check_rms_norm_fwd,
      check_rms_norm_bwd,
      check_softmax_fwd,
      check_softmax_bwd,
      check_cross_entropy_fwd,
      check_cross_entropy_bwd,
  };
  int failed = 0;
  for (const auto& run : checks) {
    Check c;
    try {
      c = run();
    } catch (const Error& e) {  // a kernel that throws on valid input fails its check
      c = {std::string("(threw) ") + e.what(), NAN, 0};
    }
    failed += c.pass() ? 0 : 1;
    std::printf("  %s  %-54s max rel err %.1e (tol %.0e)\n", c.pass() ? "PASS" : "FAIL", c.name.c_str(), c.error,
                c.tolerance);
  }
  const int cuda_failed = check_cuda_kernels();
  micro_benchmark(quick);
  HSPMD_CHECK(failed == 0) << "selfcheck: " << failed << " of " << checks.size() << " kernel checks failed";
  HSPMD_CHECK(cuda_failed == 0) << "selfcheck: " << cuda_failed << " CUDA kernel checks failed";
  std::printf("\nall %zu kernel checks passed\n", checks.size());
}

}  // namespace

void add_selfcheck_command(CLI::App& app) {
  struct Args {
    int threads = 0;
    bool quick = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "selfcheck", "Check every CPU kernel against a reference (PASS/FAIL), then print a short micro-benchmark");
  cmd->add_option("--threads", args->threads, "Kernel threads (OpenMP and OpenBLAS); default: all cores")
      ->check(CLI::Range(1, 4096));
  cmd->add_flag("--quick", args->quick, "Smaller micro-benchmark (under a second)");
  cmd->callback([args] { run_selfcheck(args->threads, args->quick); });
}

}  // namespace hspmd::cli
