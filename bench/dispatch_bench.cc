// Dispatch by length on mixed-length data, side by side on emulated heterogeneous devices (CPU
// emulation, not GPUs: examples/devices/local-hetero-4-dilated.json, ranks 0 and 1 at an eighth of
// the host's speed, 2 and 3 at a twenty-fourth, so the four ranks' compute fits the share of two
// cores a busy host leaves and the emulated speeds hold), 4 ranks as threads of this process over
// Gloo, one kernel thread each, configs/llama-tiny.json.
//
// Data: a long-tailed synthetic length distribution: document lengths lognormal with median 32
// tokens and sigma 1.0, clipped to 512 = 16x the median (`hspmd data long-tailed`, text from the
// bundled KJV excerpt); context length 512, 4096 tokens per step.
//
// Compared:
//   dynamic     strategies per maximum length (<= 384: examples/strategies/local-mixed-short.json, TP 2
//               on the fast ranks next to a 2-stage pipeline on the slow ones; <= 512:
//               mixed-long.json, four single-rank pipelines), the one with the
//               lowest predicted time per batch (switch included), sequences dispatched over its
//               pipelines by the cost model (tuning/dispatched_training.h); the cost model's
//               profile is measured first on this host with the emulated devices (as `hspmd
//               profile --devices` does)
//   homogeneous the best of DP4, DP2 x TP2 and TP2 x PP2, each batch split by token weight
//               (the runtime's default), packed without padding
//   fixed       the best homogeneous strategy with every row padded to the context length
//               ("pack to a fixed length")
// Per configuration: the mean step time over steps 2..N (wall, including any switch), the padding
// share (pad tokens / tokens computed) and the idle share: the share of the traced steps a rank
// spends not computing forward and backward passes (the pipeline bubble, waiting for peers and for
// the slowest pipeline in the gradient sync, communication, the optimizer), averaged over ranks.
// Rounds interleave the configurations; the best round of each counts.
//
// Run (from build/release): ./bench_dispatch_bench [--steps=N] [--rounds=N]   (default 6 and 2)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "bench_data.h"
#include "hspmd/comm/thread_ranks.h"
#include "hspmd/data/long_tailed.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/tuning/dispatched_training.h"
#include "hspmd/tuning/profiler.h"

namespace hspmd {
namespace {

namespace fs = std::filesystem;
const std::string kRoot = fs::path(__FILE__).parent_path().parent_path().string();
using Clock = std::chrono::steady_clock;
const char* kDevices = "/examples/devices/local-hetero-4-dilated.json";

struct Homogeneous {
  const char* label;
  const char* json;
};
const std::vector<Homogeneous> kHomogeneous = {
    {"DP4", R"({"name": "dp4", "pipelines": [
      {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0", "layers": "0-3"}]},
      {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "1", "layers": "0-3"}]},
      {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "2", "layers": "0-3"}]},
      {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "3", "layers": "0-3"}]}]})"},
    {"DP2 x TP2", R"({"name": "dp2-tp2", "pipelines": [
      {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
      {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "2-3", "layers": "0-3"}]}]})"},
    {"TP2 x PP2", R"({"name": "tp2-pp2", "pipelines": [{"micro_batch_size": 2, "num_micro_batches": 4,
      "stages": [{"ranks": "0-1", "layers": "0-1"}, {"ranks": "2-3", "layers": "2-3"}]}]})"},
};

runtime::TrainerOptions train_options(int steps) {
  runtime::TrainerOptions o;
  o.steps = steps;
  o.seq_len = 512;
  o.global_batch_tokens = 4096;
  o.threads = 1;
  return o;
}

struct Measured {
  double step_seconds = std::numeric_limits<double>::infinity();
  double padding = 0;  // share of computed tokens that are padding
  double idle = 0;     // mean over ranks of the idle share
  int switches = 0;
  std::string note;
};

// Padding share of the steps' batches when every pipeline's micro-batches are rows padded to seq_len.
double padding_share(const data::TokenDataset& ds, const runtime::TrainerOptions& o, const sharding::Strategy& st) {
  data::Loader loader(ds, {.seq_len = o.seq_len, .global_batch_tokens = o.global_batch_tokens, .seed = o.seed});
  std::vector<data::PartSpec> parts;
  for (const auto& p : st.pipelines) parts.push_back({double(p.micro_batch_size) * p.num_micro_batches, p.num_micro_batches});
  double real = 0, computed = 0;
  for (int s = 0; s < o.steps; ++s) {
    const std::vector<data::Segment> batch = loader.next();
    for (const data::Segment& seg : batch) real += static_cast<double>(seg.tokens.size());
    for (const auto& pipeline : data::split_global_batch(batch, parts)) {
      for (const auto& mb : pipeline) {
        if (mb.empty()) continue;
        computed += static_cast<double>(
            data::pack(mb, {.seq_len = o.seq_len, .layout = data::BatchLayout::kPackedFixed}).num_tokens());
      }
    }
  }
  return computed > 0 ? 1 - real / computed : 0;
}

// One run; `by_length` non-null: dispatch by length.
Measured measure(const models::LlamaConfig& config, const data::TokenDataset& ds, const runtime::EmulatedDevices& devices,
                 int steps,
                 const sharding::Strategy* single, const planner::LengthStrategies* by_length, data::BatchLayout layout) {
  const runtime::TrainerOptions o = train_options(steps);
  Measured m;
  std::vector<double> idle(4, 0);
  std::mutex mutex;
  std::string log;
  comm::run_thread_ranks(4, [&](int rank, comm::GroupCache& groups) {
    runtime::DistOptions options;
    options.train = o;
    options.device = devices.of(rank);
    options.trace = true;
    options.layout = layout;
    std::unique_ptr<tuning::DispatchedTraining> run;
    size_t first = 0;
    sharding::AnnotationPlan plan;
    if (by_length) {
      run = std::make_unique<tuning::DispatchedTraining>(*by_length, 2);
      first = run->first_strategy(ds, o, {});
      run->install(options);
      plan = by_length->plan(first);
    } else {
      plan = models::compile_llama_plan(config, *single);
    }
    runtime::DistTrainer t(models::llama(config), ds, plan, options, rank, 4, groups);
    if (run) run->start(ds, o, t.loader_state(), first, 1);
    double total = 0;
    for (int s = 0; s < steps; ++s) {
      if (s == 1) t.tracer().clear();  // step 1 connects the groups: not part of the measure
      const auto start = Clock::now();
      if (run) run->before_step(t);
      t.step();
      if (s >= 1) total += std::chrono::duration<double>(Clock::now() - start).count();
      if (run && rank == 0 && s < 3) log += "    " + run->decision().to_string(*by_length) + "\n";
    }
    const runtime::TraceSummary summary = t.tracer().summary();
    std::lock_guard<std::mutex> lock(mutex);
    // F/B spans contain their Reshards' comm spans (waiting for a peer included): computing is
    // compute - comm; the rest of the window is the bubble, waiting for peers and the slowest
    // pipeline (inside the gradient sync), communication and the optimizer.
    idle[rank] = std::clamp(1 - (summary.share("compute") - summary.share("comm")), 0.0, 1.0);
    if (rank == 0) {
      m.step_seconds = total / (steps - 1);
      if (run) m.switches = run->switches();
    }
  }, comm::Millis(600'000));  // dilated slow ranks: a step's wait for a peer can take seconds
  for (double i : idle) m.idle += i / 4;
  m.note = log;
  return m;
}

}  // namespace
}  // namespace hspmd

int main(int argc, char** argv) {
  using namespace hspmd;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress shows while it runs
  int steps = 6, rounds = 2;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--steps=", 8) == 0) steps = std::max(2, std::atoi(argv[i] + 8));
    if (std::strncmp(argv[i], "--rounds=", 9) == 0) rounds = std::max(1, std::atoi(argv[i] + 9));
  }
  const models::LlamaConfig config = models::LlamaConfig::from_file(kRoot + "/configs/llama-tiny.json");
  const data::TokenDataset kjv = data::TokenDataset::open(bench::prepared_kjv_dataset(kRoot));
  const std::string mixed_dir = (fs::temp_directory_path() / "hspmd-bench-dispatch-mixed").string();
  const data::LongTailedOptions shape{.documents = 8000, .median = 32, .max_length = 512, .sigma = 1.0, .seed = 1};
  fs::remove_all(mixed_dir);
  data::write_long_tailed_dataset(kjv, mixed_dir, shape);
  const data::TokenDataset ds = data::TokenDataset::open(mixed_dir);
  const runtime::TrainerOptions o = train_options(steps);
  const runtime::EmulatedDevices devices = runtime::EmulatedDevices::from_file(kRoot + kDevices, 4);
  std::printf("%s\n", devices.describe().c_str());
  std::printf("data: %llu documents, lognormal lengths (median %.0f, sigma %.1f) clipped to %lld (16x the median); "
              "seq_len %lld, %lld tokens per step; %d steps per run (first not timed), best of %d rounds\n",
              static_cast<unsigned long long>(ds.num_documents()), shape.median, shape.sigma,
              static_cast<long long>(shape.max_length), static_cast<long long>(o.seq_len),
              static_cast<long long>(o.global_batch_tokens), steps, rounds);

  // The cost model's profile: measured on this host with the emulated devices.
  const auto profile_start = Clock::now();
  const planner::Profile profile = tuning::profile_host(
      models::Llama(config), {.model = "configs/llama-tiny.json", .tp_degrees = {1, 2}, .cp_degrees = {1},
               .seq_lens = {64, 256, 512}, .micro_batch_sizes = {1}, .repeats = 2, .devices = &devices, .progress = {}});
  std::printf("profiled the emulated devices in %.1f s\n",
              std::chrono::duration<double>(Clock::now() - profile_start).count());
  const resolve::Topology topo = resolve::Topology::from_file(kRoot + "/examples/clusters/local-hetero-4.json");
  const planner::CostModel cm(models::Llama(config), topo, profile, {.seq_len = o.seq_len});
  const planner::LengthStrategies set(
      models::Llama(config), cm,
      {{384, sharding::Strategy::from_file(kRoot + "/examples/strategies/local-mixed-short.json")},
       {512, sharding::Strategy::from_file(kRoot + "/examples/strategies/local-mixed-long.json")}},
      {.seq_len = o.seq_len});

  Measured dynamic;
  std::vector<Measured> homogeneous(kHomogeneous.size());
  for (int round = 0; round < rounds; ++round) {
    Measured d = measure(config, ds, devices, steps, nullptr, &set, data::BatchLayout::kPacked);
    std::printf("  round %d: dynamic %.3f s/step\n", round + 1, d.step_seconds);
    if (d.step_seconds < dynamic.step_seconds) dynamic = d;
    for (size_t i = 0; i < kHomogeneous.size(); ++i) {
      const sharding::Strategy st = sharding::Strategy::from_json_text(kHomogeneous[i].json, "bench");
      Measured h = measure(config, ds, devices, steps, &st, nullptr, data::BatchLayout::kPacked);
      std::printf("  round %d: %s %.3f s/step\n", round + 1, kHomogeneous[i].label, h.step_seconds);
      if (h.step_seconds < homogeneous[i].step_seconds) homogeneous[i] = h;
    }
  }
  size_t best = 0;
  for (size_t i = 0; i < kHomogeneous.size(); ++i) {
    std::printf("  homogeneous %-10s %.3f s/step, idle %4.1f%%\n", kHomogeneous[i].label, homogeneous[i].step_seconds,
                100 * homogeneous[i].idle);
    if (homogeneous[i].step_seconds < homogeneous[best].step_seconds) best = i;
  }
  const sharding::Strategy best_st = sharding::Strategy::from_json_text(kHomogeneous[best].json, "bench");
  Measured fixed;
  for (int round = 0; round < rounds; ++round) {
    Measured f = measure(config, ds, devices, steps, &best_st, nullptr, data::BatchLayout::kPackedFixed);
    if (f.step_seconds < fixed.step_seconds) fixed = f;
  }
  fixed.padding = padding_share(ds, o, best_st);

  std::printf("\n%-44s %10s %9s %7s %9s\n", "configuration", "step (s)", "padding", "idle", "vs best");
  auto row = [&](const std::string& label, const Measured& m) {
    std::printf("%-44s %10.3f %8.1f%% %6.1f%% %8.2fx\n", label.c_str(), m.step_seconds, 100 * m.padding, 100 * m.idle,
                homogeneous[best].step_seconds / m.step_seconds);
  };
  row("dynamic dispatch, strategies per max length", dynamic);
  row(std::string("best homogeneous (") + kHomogeneous[best].label + ")", homogeneous[best]);
  row(std::string("packed to a fixed length (") + kHomogeneous[best].label + ")", fixed);
  std::printf("\ndynamic: %d switches in %d steps; first decisions:\n%s", dynamic.switches, steps, dynamic.note.c_str());
  return 0;
}
