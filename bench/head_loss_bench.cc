// The lm head and its loss, forward and backward: the fused kernels (kernels/lm_head_loss.h, chunks of
// tokens, the logits never whole) against a matmul and the cross-entropy kernels over the whole
// logits, side by side in one run, at 2048 tokens x hidden 512 for a small and a Llama-sized
// vocabulary. Reports tokens per second and the peak bytes of the buffers each side allocates for
// the logits (the allocator's high-water mark: the logits and their gradient apart, one chunk fused).
//
//   bench_head_loss_bench [--threads=N] [google benchmark flags]   (the table: each side's best repetition)
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>
#include <vector>

#include "hspmd/core/random.h"
#include "hspmd/kernels/cross_entropy.h"
#include "hspmd/kernels/lm_head_loss.h"
#include "hspmd/kernels/matmul.h"
#include "hspmd/kernels/threading.h"

#include "kernel_bench_support.h"

namespace {

using hspmd::DType;
using hspmd::Tensor;

constexpr int64_t kTokens = 2048, kHidden = 512;

struct Head {
  Tensor x, w, targets, dlosses, dx, dw;
  explicit Head(int64_t vocab)
      : x(Tensor::empty({kTokens, kHidden}, DType::kFloat32)),
        w(Tensor::empty({vocab, kHidden}, DType::kFloat32)),
        targets(Tensor::empty({kTokens}, DType::kInt64)),
        dlosses(Tensor::full({kTokens}, DType::kFloat32, 1.0 / kTokens)),
        dx(Tensor::empty({kTokens, kHidden}, DType::kFloat32)),
        dw(Tensor::empty({vocab, kHidden}, DType::kFloat32)) {
    hspmd::fill_uniform(x, 1, -1.0, 1.0);
    hspmd::fill_uniform(w, 2, -0.05, 0.05);
    for (int64_t t = 0; t < kTokens; ++t) targets.data<int64_t>()[t] = (t * 7919) % vocab;
  }
};

void run_apart(const Head& h, hspmd::Allocator& logits_memory) {
  const int64_t vocab = h.w.dim(0);
  Tensor logits = Tensor::empty({kTokens, vocab}, DType::kFloat32, &logits_memory);
  hspmd::kernels::matmul(h.x, h.w, logits, {.trans_b = true});
  Tensor losses = Tensor::empty({kTokens}, DType::kFloat32), lse = Tensor::empty({kTokens}, DType::kFloat32);
  hspmd::kernels::cross_entropy_fwd(logits, h.targets, losses, lse);
  Tensor dlogits = Tensor::empty({kTokens, vocab}, DType::kFloat32, &logits_memory);
  hspmd::kernels::cross_entropy_bwd(logits, h.targets, lse, h.dlosses, dlogits);
  hspmd::kernels::matmul(dlogits, h.w, h.dx);
  hspmd::kernels::matmul(dlogits, h.x, h.dw, {.trans_a = true});
}

void run_fused(const Head& h, hspmd::Allocator& logits_memory) {
  const hspmd::kernels::LmHeadLossOptions o{.loss = {}, .allocator = &logits_memory};
  Tensor stats = Tensor::empty({3, kTokens}, DType::kFloat64);
  hspmd::kernels::lm_head_loss_stats(h.x, h.w, h.targets, stats, o);
  Tensor losses = Tensor::empty({kTokens}, DType::kFloat32), lse = Tensor::empty({kTokens}, DType::kFloat32);
  hspmd::kernels::cross_entropy_combine(stats, h.targets, losses, lse);
  hspmd::kernels::lm_head_loss_bwd(h.x, h.w, h.targets, lse, h.dlosses, h.dx, h.dw, o);
}

void bm_head(benchmark::State& state, int64_t vocab, bool fused) {
  const Head h(vocab);
  hspmd::Allocator logits_memory;
  for (auto _ : state) {
    fused ? run_fused(h, logits_memory) : run_apart(h, logits_memory);
    benchmark::DoNotOptimize(h.dw.raw_data());
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(kTokens) * static_cast<double>(state.iterations()),
                                                  benchmark::Counter::kIsRate);
  state.counters["logits_MiB"] = static_cast<double>(logits_memory.peak_bytes()) / (1 << 20);
}

}  // namespace

int main(int argc, char** argv) {
  if (!hspmd::bench::init_benchmark_with_threads(argc, argv)) return 1;
  const std::vector<int64_t> vocabs = {2048, 32000};
  for (int64_t v : vocabs) {
    for (const bool fused : {false, true}) {
      const std::string name = std::string(fused ? "fused" : "apart") + "/V" + std::to_string(v);
      benchmark::RegisterBenchmark(name.c_str(), bm_head, v, fused)->UseRealTime()->Unit(benchmark::kMillisecond);
    }
  }
  hspmd::bench::BestCounterReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  std::printf("\nlm head + loss fwd+bwd, %lld tokens x H %lld, %d threads: fused / apart\n",
              static_cast<long long>(kTokens), static_cast<long long>(kHidden), hspmd::kernels::num_threads());
  std::printf("%-8s %14s %14s %7s %12s %12s\n", "vocab", "apart tok/s", "fused tok/s", "ratio", "apart MiB", "fused MiB");
  const auto& values = reporter.best();
  for (int64_t v : vocabs) {
    auto a = values.find("apart/V" + std::to_string(v) + "/real_time");
    auto f = values.find("fused/V" + std::to_string(v) + "/real_time");
    if (a == values.end() || f == values.end()) continue;  // filtered out
    std::printf("%-8lld %14.0f %14.0f %7.2f %12.1f %12.1f\n", static_cast<long long>(v), a->second.at("tokens/s"),
                f->second.at("tokens/s"), f->second.at("tokens/s") / a->second.at("tokens/s"),
                a->second.at("logits_MiB"), f->second.at("logits_MiB"));
  }
  return 0;
}
