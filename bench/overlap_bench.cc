// Gradient sync overlapped with the backward pass (runtime/bucketed_gradient_sync.h) against the
// sync after it, on emulated devices (CPU emulation, not GPUs; runtime/emulation.h): DP over 2
// ranks, threads of this process over Gloo (loopback TCP), one kernel thread each, every rank at
// the same emulated speed (default 0.5: compute takes twice this host's, which leaves the host's
// cores time to move the gradients, as a GPU's copy engines and NICs do). A model whose gradients
// are large next to the compute of a short batch (one row of 128 tokens per rank by default), so the
// DP sync is a good part of the step: about a third of it on this host. (At 32 tokens the sync takes
// half the step, longer than the backward pass it can overlap with, so no overlap could hide half.)
//
// Per configuration (grad_bucket_mb 0 = after the backward pass, then overlapped with buckets of a
// few sizes), the mean step time of steps 2..N of one run (step 1 connects the groups); the
// configurations run interleaved, `repeats` rounds, and the best round of each is reported. The
// sync time is rank 0's traced gradient reduction in the runs without overlap (its "grad-bucket"
// spans: all of it is exposed there); hidden = (step without - step with) / sync.
//
// ZeRO-3 rows ("zero": 3, the same DP 2): its per-layer parameter gathers (F and B) and gradient
// reduce-scatters on the computing thread (grad_bucket_mb 0) against the communication thread
// (any size > 0: gathers one layer ahead, each op's gradients reduced while B computes the next);
// its communication time is rank 0's traced ".gather" and "grad-shards" spans without overlap,
// interleaved with the rows above.
//
// Run: build/release/bench_overlap_bench [--steps=N] [--repeats=R] [--speed=S] [--seq-len=L] [--model=CONFIG]
//      (defaults: 4 steps, 3 repeats, speed 0.5, 128 tokens, bench/llama-16m.json)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "bench_data.h"
#include "load_average.h"
#include "hspmd/comm/thread_ranks.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/runtime/dist_trainer.h"

namespace hspmd {
namespace {

const std::string kRoot = std::filesystem::path(__FILE__).parent_path().parent_path().string();

std::string dp2(const models::LlamaConfig& config, int zero) {
  const std::string layers = "0-" + std::to_string(config.num_hidden_layers - 1);
  auto pipeline = [&](int rank) {
    return R"({"micro_batch_size": 1, "num_micro_batches": 1, "stages": [{"ranks": ")" + std::to_string(rank) +
           R"(", "layers": ")" + layers + R"("}]})";
  };
  return R"({"name": "dp2", "zero": )" + std::to_string(zero) + R"(, "pipelines": [)" + pipeline(0) + ", " +
         pipeline(1) + "]}";
}

struct Measured {
  double step_seconds = 0;  // rank 0's mean over the timed steps
  double sync_seconds = 0;  // rank 0's traced gradient reduction (ZeRO-3: and gathers) per timed step
};

// A row: ZeRO stage and bucket size.
struct Configuration {
  int zero = 0;
  double bucket_mb = 0;
};

Measured measure(const models::LlamaConfig& config, const data::TokenDataset& ds, Configuration c, double speed,
                 int64_t seq_len, int steps) {
  const sharding::Strategy st = sharding::Strategy::from_json_text(dp2(config, c.zero), "bench");
  const sharding::AnnotationPlan plan = models::compile_llama_plan(config, st);
  Measured m;
  comm::run_thread_ranks(2, [&](int rank, comm::GroupCache& groups) {
    runtime::DistOptions o;
    o.train.steps = steps;
    o.train.seq_len = seq_len;
    o.train.global_batch_tokens = 2 * seq_len;  // one row per rank: little compute per byte of gradient
    o.train.threads = 1;
    o.device.rank = rank;
    o.device.speed = speed;
    o.trace = true;
    o.grad_bucket_mb = c.bucket_mb;
    runtime::DistTrainer t(models::llama(config), ds, plan, o, rank, 2, groups);
    double total = 0;
    for (int s = 0; s < steps; ++s) {
      if (s == 1) t.tracer().clear();  // step 1 connects the groups: not part of the measure
      const double seconds = t.step().step_seconds;
      if (s >= 1) total += seconds;
    }
    if (rank != 0) return;
    m.step_seconds = total / (steps - 1);
    double sync_us = 0;
    for (const runtime::TraceEvent& e : t.tracer().events()) {
      const bool zero3_comm = e.name.ends_with(".gather") || e.name.starts_with("grad-shards");
      if (e.name.starts_with("grad-bucket") || (c.zero == 3 && zero3_comm)) sync_us += e.duration_us;
    }
    m.sync_seconds = sync_us * 1e-6 / (steps - 1);
  });
  return m;
}

}  // namespace
}  // namespace hspmd

int main(int argc, char** argv) {
  using namespace hspmd;
  int steps = 4, repeats = 3;
  double speed = 0.5;
  int64_t seq_len = 128;
  std::string model = kRoot + "/bench/llama-16m.json";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--steps=", 8) == 0) steps = std::max(2, std::atoi(argv[i] + 8));
    if (std::strncmp(argv[i], "--repeats=", 10) == 0) repeats = std::max(1, std::atoi(argv[i] + 10));
    if (std::strncmp(argv[i], "--speed=", 8) == 0) speed = std::atof(argv[i] + 8);
    if (std::strncmp(argv[i], "--model=", 8) == 0) model = argv[i] + 8;
    if (std::strncmp(argv[i], "--seq-len=", 10) == 0) seq_len = std::max(2, std::atoi(argv[i] + 10));
  }
  const models::LlamaConfig config = models::LlamaConfig::from_file(model);
  const data::TokenDataset ds = data::TokenDataset::open(bench::prepared_kjv_dataset(kRoot));
  const std::vector<Configuration> rows{{0, 0}, {0, 25}, {0, 4}, {3, 0}, {3, 4}};
  std::printf("Emulated devices (CPU emulation, not GPUs): DP 2, both ranks speed %.2f; %s, one row of %lld tokens\n"
              "per rank; %d steps per run (first not timed), %d interleaved rounds, best round shown; %u host cores, "
              "load %.2f at start\n\n",
              speed, std::filesystem::path(model).filename().c_str(), static_cast<long long>(seq_len), steps, repeats,
              std::thread::hardware_concurrency(), bench::load_average());
  std::vector<Measured> best(rows.size());
  for (int r = 0; r < repeats; ++r) {
    for (size_t b = 0; b < rows.size(); ++b) {
      const Measured m = measure(config, ds, rows[b], speed, seq_len, steps);
      if (r == 0 || m.step_seconds < best[b].step_seconds) best[b] = m;
    }
  }
  std::printf("%-36s %10s %10s %12s\n", "gradient sync", "step (s)", "vs after", "sync hidden");
  const Measured* after = nullptr;  // the row without overlap of the same stage
  for (size_t b = 0; b < rows.size(); ++b) {
    const bool zero3 = rows[b].zero == 3;
    if (rows[b].bucket_mb == 0) {
      after = &best[b];
      std::printf("%-36s %10.3f %10.2f %12s   (%s %.3f s = %.0f%% of the step)\n",
                  zero3 ? "ZeRO-3, on the computing thread" : "after the backward", after->step_seconds, 1.0, "-",
                  zero3 ? "gathers and reductions" : "sync", after->sync_seconds,
                  100 * after->sync_seconds / after->step_seconds);
      continue;
    }
    const std::string label = zero3 ? std::string("ZeRO-3, on the communication thread")
                                    : "overlapped, " + std::to_string(rows[b].bucket_mb).substr(0, 4) + " MiB buckets";
    const double hidden = (after->step_seconds - best[b].step_seconds) / after->sync_seconds;
    std::printf("%-36s %10.3f %10.2f %11.0f%%\n", label.c_str(), best[b].step_seconds,
                best[b].step_seconds / after->step_seconds, 100 * hidden);
  }
  std::printf("\nload %.2f at the end\n", bench::load_average());
  return 0;
}
