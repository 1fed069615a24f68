// Heterogeneous vs homogeneous strategies on emulated heterogeneous devices (CPU emulation, not
// GPUs; architecture §5): ranks 0 and 1 at full speed, ranks 2 and 3 at one third (the speeds of
// examples/devices/local-hetero-4.json). Same model (configs/llama-tiny.json), same global batch
// (2048 tokens, rows of 256), four ranks as threads of this process over Gloo, one kernel thread
// each. Per strategy: the mean step time (steps 2..N; step 1 connects the groups) and its ratio to
// the ideal balanced time = (one full-speed rank training the whole batch alone) / (sum of speeds).
// Then, per rank, the share of the step spent computing, communicating, in the optimizer and idle
// (the pipeline bubble and waiting for slower peers), from the rank's trace.
//
// Run: build/release/bench_hetero [--steps=N]   (default 4 steps per strategy)
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench_data.h"
#include "hspmd/comm/thread_ranks.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/runtime/dist_trainer.h"

namespace hspmd {
namespace {

const std::string kRoot = std::filesystem::path(__FILE__).parent_path().parent_path().string();
constexpr double kSlow = 1.0 / 3.0;

struct Candidate {
  const char* label;
  bool heterogeneous;
  const char* strategy;  // JSON
};

// Homogeneous: every rank gets the same share of work. Heterogeneous: shares follow speeds.
const std::vector<Candidate> kCandidates = {
    {"DP4, 2 rows each", false, R"({"name": "dp4", "pipelines": [
      {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0", "layers": "0-3"}]},
      {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "1", "layers": "0-3"}]},
      {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "2", "layers": "0-3"}]},
      {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "3", "layers": "0-3"}]}]})"},
    {"DP2 x TP2", false, R"({"name": "dp2-tp2", "pipelines": [
      {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
      {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "2-3", "layers": "0-3"}]}]})"},
    {"DP2 x PP2 (fast->slow)", false, R"({"name": "dp2-pp2", "pipelines": [
      {"micro_batch_size": 1, "num_micro_batches": 4,
       "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "2", "layers": "2-3"}]},
      {"micro_batch_size": 1, "num_micro_batches": 4,
       "stages": [{"ranks": "1", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}]})"},
    {"hetero DP, rows 3:3:1:1", true, R"({"name": "hetero-dp", "pipelines": [
      {"micro_batch_size": 3, "num_micro_batches": 1, "stages": [{"ranks": "0", "layers": "0-3"}]},
      {"micro_batch_size": 3, "num_micro_batches": 1, "stages": [{"ranks": "1", "layers": "0-3"}]},
      {"micro_batch_size": 1, "num_micro_batches": 1, "stages": [{"ranks": "2", "layers": "0-3"}]},
      {"micro_batch_size": 1, "num_micro_batches": 1, "stages": [{"ranks": "3", "layers": "0-3"}]}]})"},
    {"hetero TP2 (fast) + PP2 (slow), 6:2", true, R"({"name": "hetero-tp-pp", "pipelines": [
      {"micro_batch_size": 3, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
      {"micro_batch_size": 1, "num_micro_batches": 2,
       "stages": [{"ranks": "2", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}]})"},
};

struct Measured {
  double step_seconds = 0;
  std::vector<runtime::TraceSummary> ranks;
};

runtime::TrainerOptions train_options(int steps) {
  runtime::TrainerOptions o;
  o.steps = steps;
  o.seq_len = 256;
  o.global_batch_tokens = 2048;
  o.threads = 1;
  return o;
}

Measured measure(const models::LlamaConfig& config, const data::TokenDataset& ds, const std::string& json,
                 const std::vector<double>& speeds, int steps) {
  const sharding::Strategy st = sharding::Strategy::from_json_text(json, "bench");
  const sharding::AnnotationPlan plan = models::compile_llama_plan(config, st);
  const int world = static_cast<int>(st.ranks().size());
  Measured m;
  m.ranks.resize(world);
  std::mutex mutex;
  comm::run_thread_ranks(world, [&](int rank, comm::GroupCache& groups) {
    runtime::DistOptions o;
    o.train = train_options(steps);
    o.device.rank = rank;
    o.device.speed = speeds.at(rank);
    o.trace = true;
    runtime::DistTrainer t(models::llama(config), ds, plan, o, rank, world, groups);
    double total = 0;
    for (int s = 0; s < steps; ++s) {
      if (s == 1) t.tracer().clear();  // step 1 connects the groups: not part of the measure
      const double seconds = t.step().step_seconds;
      if (s >= 1) total += seconds;
    }
    std::lock_guard<std::mutex> lock(mutex);
    m.ranks[rank] = t.tracer().summary();
    if (rank == 0) m.step_seconds = total / (steps - 1);
  });
  return m;
}

}  // namespace
}  // namespace hspmd

int main(int argc, char** argv) {
  using namespace hspmd;
  int steps = 4;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--steps=", 8) == 0) steps = std::max(2, std::atoi(argv[i] + 8));
  }
  const models::LlamaConfig config = models::LlamaConfig::from_file(kRoot + "/configs/llama-tiny.json");
  const data::TokenDataset ds = data::TokenDataset::open(bench::prepared_kjv_dataset(kRoot));
  std::printf("Emulated devices (CPU emulation, not GPUs): ranks 0,1 speed 1.00, ranks 2,3 speed %.2f\n", kSlow);
  std::printf("configs/llama-tiny.json, 2048 tokens per step, %d steps per strategy (first not timed); %u host cores\n"
              "run the 4 ranks (the ideal assumes 4 independent devices)\n\n",
              steps, std::thread::hardware_concurrency());

  const Measured alone = measure(config, ds, R"({"name": "one", "pipelines": [
      {"micro_batch_size": 8, "num_micro_batches": 1, "stages": [{"ranks": "0", "layers": "0-3"}]}]})",
                                 {1.0}, steps);
  const double ideal = alone.step_seconds / (2 + 2 * kSlow);
  std::printf("one full-speed rank, whole batch: %.3f s/step; ideal balanced 4-rank step: %.3f s\n\n",
              alone.step_seconds, ideal);

  const std::vector<double> speeds{1.0, 1.0, kSlow, kSlow};
  std::map<std::string, Measured> results;
  double best_homogeneous = 1e30, best_heterogeneous = 1e30;
  std::string best_homogeneous_label, best_heterogeneous_label;
  std::printf("%-38s %10s %12s\n", "strategy", "step (s)", "ideal/step");
  for (const Candidate& c : kCandidates) {
    Measured m = measure(config, ds, c.strategy, speeds, steps);
    std::printf("%-38s %10.3f %12.2f\n", c.label, m.step_seconds, ideal / m.step_seconds);
    double& best = c.heterogeneous ? best_heterogeneous : best_homogeneous;
    if (m.step_seconds < best) {
      best = m.step_seconds;
      (c.heterogeneous ? best_heterogeneous_label : best_homogeneous_label) = c.label;
    }
    results[c.label] = std::move(m);
  }
  std::printf("\nbest homogeneous (%s) / best heterogeneous (%s) step time: %.2fx\n\n",
              best_homogeneous_label.c_str(), best_heterogeneous_label.c_str(), best_homogeneous / best_heterogeneous);

  std::printf("per-rank share of the traced steps: compute / communication, including waiting for a slower peer's\n"
              "data (the pipeline bubble shows here) / optimizer, including its gradient sync / idle\n");
  for (const std::string& label : {best_homogeneous_label, best_heterogeneous_label}) {
    std::printf("%s\n", label.c_str());
    const Measured& m = results.at(label);
    for (size_t r = 0; r < m.ranks.size(); ++r) {
      const runtime::TraceSummary& s = m.ranks[r];
      // Compute spans (F/B passes) contain their Reshards' comm spans: subtract to get pure compute.
      const double comm = s.share("comm"), compute = s.share("compute") - comm, opt = s.share("optimizer");
      std::printf("  rank %zu (speed %.2f): compute %5.1f%%  comm+wait %5.1f%%  optimizer %5.1f%%  idle %5.1f%%\n", r,
                  speeds[r], 100 * compute, 100 * comm, 100 * opt, 100 * std::max(0.0, 1 - compute - comm - opt));
    }
  }
  return 0;
}
