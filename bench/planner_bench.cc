// The planner and its cost model, three measures (the planner issue's benchmark):
//
// 1. paper: the paper's 48-GPU cluster (examples/clusters/paper-16h800-32h20.json) with the
//    profiles derived from its datasheet figures (planner/derived_profile.h: DERIVED, not measured):
//    for Llama 32B and 70B and each of the Table 9 device sets, the planner's planning time and the
//    predicted step time of its plan vs the Table 9 strategy's, under the same cost model.
// 2. error: cost-model error on emulated heterogeneous devices (CPU emulation, not GPUs; four ranks
//    as threads, one kernel thread each). Each round profiles the host (tuning/profiler.h) with the
//    devices of examples/devices/local-hetero-4-dilated.json: time dilated 8x (fast ranks at 1/8 of
//    the host, slow at 1/24), so that the ranks' compute (1/8 + 1/8 + 1/24 + 1/24 = 1/3 of a core)
//    fits the 2 cores with room to spare and a rank rarely waits for a core held by another rank.
//    The data are documents of exactly one sequence (every row full, as the cost model assumes).
//    Then each strategy's step is predicted from that round's profile and measured: rounds
//    interleave the strategies, a strategy's measure is its median step over the second half of its
//    steps (the first steps connect the groups and warm up memory), and of its rounds the one it
//    measured fastest counts, with that round's prediction. Error = |predicted - measured| / measured. Per strategy, stderr shows each rank's phases (passes, communication inside them,
//    gradient sync + optimizer, compute CPU time) next to the predicted per-stage figures.
// 3. emulated: the planner's plan for those devices, measured in the same rounds as the
//    homogeneous strategies (every rank the same share of work), vs the best of them.
//
// On a shared host, run the emulated part under a real-time priority (root: `chrt -f 10`): other
// processes then neither delay the ranks' messages by a scheduler slice nor evict their caches
// mid-op; the ranks mostly sleep (the dilation), so the host keeps its cores.
// Run: build/release/bench_planner_bench [--part=paper|emulated|all] [--steps=N] [--rounds=R] [--only=cp]
//      (--only=cp: only the strategies with CP stages and the planner's plan; the summary gives the
//      median error with and without CP stages separately)
//      (from build/release; the emulated part: chrt -f 10 ./bench_planner_bench --part=emulated --rounds=2)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "hspmd/comm/thread_ranks.h"
#include "hspmd/core/elapsed.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/planner/cost_model.h"
#include "hspmd/planner/derived_profile.h"
#include "hspmd/planner/planner.h"
#include "hspmd/runtime/compute_pacer.h"
#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/runtime/emulation.h"
#include "hspmd/tuning/profiler.h"

#include "load_average.h"

namespace hspmd {
namespace {

const std::string kRoot = std::filesystem::path(__FILE__).parent_path().parent_path().string();

using bench::load_average;

void paper() {
  const resolve::Topology topo = resolve::Topology::from_file(kRoot + "/examples/clusters/paper-16h800-32h20.json");
  std::printf("== paper cluster (%s), profiles DERIVED from the paper's figures, global batch 64 x 4096 ==\n"
              "host load average %.1f on %u cores (plan = wall seconds, plan cpu = this process's CPU seconds)\n",
              topo.name().c_str(), load_average(), std::thread::hardware_concurrency());
  std::printf("%-6s %-14s %10s %10s %14s %14s %8s\n", "model", "devices", "plan (s)", "plan cpu", "planner step",
              "Table 9 step", "ratio");
  for (const char* model : {"32b", "70b"}) {
    const models::LlamaConfig config = models::LlamaConfig::from_file(kRoot + "/configs/llama-" + model + ".json");
    const planner::Profile profile = planner::derive_profile(models::Llama(config), topo, {});
    for (const char* set : {"16h800-16h20", "16h800-24h20", "16h800-32h20"}) {
      const sharding::Strategy table9 = sharding::Strategy::from_file(kRoot + "/examples/strategies/table9-" + model +
                                                                      "-" + set + ".json");
      planner::PlannerOptions o;
      o.global_batch = 64;
      o.seq_len = 4096;
      o.devices = table9.ranks();
      const planner::Planner planner(models::Llama(config), topo, profile, o);
      const std::clock_t cpu = std::clock();
      const planner::Plan plan = planner.plan();
      const double cpu_seconds = static_cast<double>(std::clock() - cpu) / CLOCKS_PER_SEC;
      const planner::Prediction theirs = planner.cost_model().predict(table9);
      std::printf("%-6s %-14s %10.2f %10.2f %14.3f %14.3f %8.3f%s\n", model, set, plan.planning_seconds, cpu_seconds,
                  plan.prediction.step_seconds, theirs.step_seconds, plan.prediction.step_seconds / theirs.step_seconds,
                  theirs.fits ? "" : " (Table 9 over memory in this model)");
      std::fflush(stdout);
    }
  }
}

struct Candidate {
  std::string label;
  bool homogeneous;
  sharding::Strategy strategy;
};

sharding::Strategy parse(const std::string& json) { return sharding::Strategy::from_json_text(json, "bench"); }

std::vector<Candidate> candidates() {
  return {
      {"DP4, 2 rows each", true, parse(R"({"name": "dp4", "pipelines": [
        {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "0", "layers": "0-3"}]},
        {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "1", "layers": "0-3"}]},
        {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "2", "layers": "0-3"}]},
        {"micro_batch_size": 2, "num_micro_batches": 1, "stages": [{"ranks": "3", "layers": "0-3"}]}]})")},
      {"DP2 x TP2", true, parse(R"({"name": "dp2-tp2", "pipelines": [
        {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
        {"micro_batch_size": 4, "num_micro_batches": 1, "stages": [{"ranks": "2-3", "layers": "0-3"}]}]})")},
      {"DP2 x PP2 (fast->slow)", true, parse(R"({"name": "dp2-pp2", "pipelines": [
        {"micro_batch_size": 1, "num_micro_batches": 4,
         "stages": [{"ranks": "0", "layers": "0-1"}, {"ranks": "2", "layers": "2-3"}]},
        {"micro_batch_size": 1, "num_micro_batches": 4,
         "stages": [{"ranks": "1", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}]})")},
      {"TP2 x PP2 (fast->slow)", true, parse(R"({"name": "tp2-pp2", "pipelines": [
        {"micro_batch_size": 2, "num_micro_batches": 4,
         "stages": [{"ranks": "0-1", "layers": "0-1"}, {"ranks": "2-3", "layers": "2-3"}]}]})")},
      {"PP4, 1 layer each", true, parse(R"({"name": "pp4", "pipelines": [
        {"micro_batch_size": 1, "num_micro_batches": 8,
         "stages": [{"ranks": "0", "layers": "0"}, {"ranks": "1", "layers": "1"},
                    {"ranks": "2", "layers": "2"}, {"ranks": "3", "layers": "3"}]}]})")},
      {"hetero DP, rows 3:3:1:1", false, parse(R"({"name": "hetero-dp", "pipelines": [
        {"micro_batch_size": 3, "num_micro_batches": 1, "stages": [{"ranks": "0", "layers": "0-3"}]},
        {"micro_batch_size": 3, "num_micro_batches": 1, "stages": [{"ranks": "1", "layers": "0-3"}]},
        {"micro_batch_size": 1, "num_micro_batches": 1, "stages": [{"ranks": "2", "layers": "0-3"}]},
        {"micro_batch_size": 1, "num_micro_batches": 1, "stages": [{"ranks": "3", "layers": "0-3"}]}]})")},
      {"hetero TP2 (fast) 6 + PP2 (slow) 2", false, parse(R"({"name": "hetero-tp-pp", "pipelines": [
        {"micro_batch_size": 3, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3"}]},
        {"micro_batch_size": 1, "num_micro_batches": 2,
         "stages": [{"ranks": "2", "layers": "0-1"}, {"ranks": "3", "layers": "2-3"}]}]})")},
      {"hetero PP2 3:1 layers", false, parse(R"({"name": "hetero-pp", "pipelines": [
        {"micro_batch_size": 1, "num_micro_batches": 4,
         "stages": [{"ranks": "0", "layers": "0-2"}, {"ranks": "2", "layers": "3"}]},
        {"micro_batch_size": 1, "num_micro_batches": 4,
         "stages": [{"ranks": "1", "layers": "0-2"}, {"ranks": "3", "layers": "3"}]}]})")},
      {"fast only: DP2, 4 rows each", false, parse(R"({"name": "fast-dp2", "pipelines": [
        {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "0", "layers": "0-3"}]},
        {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "1", "layers": "0-3"}]}]})")},
      {"fast only: TP2", false, parse(R"({"name": "fast-tp2", "pipelines": [
        {"micro_batch_size": 2, "num_micro_batches": 4, "stages": [{"ranks": "0-1", "layers": "0-3"}]}]})")},
      // Context parallelism (priced per stage: its share of the tokens, the K/V all-gathers and
      // gradient reduce-scatters, the zigzag balance of the causal work).
      {"fast only: CP2", false, parse(R"({"name": "fast-cp2", "pipelines": [
        {"micro_batch_size": 2, "num_micro_batches": 4, "stages": [{"ranks": "0-1", "layers": "0-3", "cp": 2}]}]})")},
      {"DP2 x CP2", true, parse(R"({"name": "dp2-cp2", "pipelines": [
        {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3", "cp": 2}]},
        {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "2-3", "layers": "0-3", "cp": 2}]}]})")},
      {"hetero CP2 (fast) 6 + DP (slow) 1:1", false, parse(R"({"name": "hetero-cp2-dp", "pipelines": [
        {"micro_batch_size": 3, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": "0-3", "cp": 2}]},
        {"micro_batch_size": 1, "num_micro_batches": 1, "stages": [{"ranks": "2", "layers": "0-3"}]},
        {"micro_batch_size": 1, "num_micro_batches": 1, "stages": [{"ranks": "3", "layers": "0-3"}]}]})")},
      {"CP2 x TP2", true, parse(R"({"name": "cp2-tp2", "pipelines": [
        {"micro_batch_size": 2, "num_micro_batches": 4,
         "stages": [{"ranks": "0-3", "layers": "0-3", "tp": 2, "cp": 2}]}]})")},
      {"CP4", true, parse(R"({"name": "cp4", "pipelines": [
        {"micro_batch_size": 2, "num_micro_batches": 4, "stages": [{"ranks": "0-3", "layers": "0-3", "cp": 4}]}]})")},
      {"PP2: CP2 (fast) 3 layers -> TP2 (slow) 1", false, parse(R"({"name": "cp2-then-tp2", "pipelines": [
        {"micro_batch_size": 1, "num_micro_batches": 8,
         "stages": [{"ranks": "0-1", "layers": "0-2", "cp": 2}, {"ranks": "2-3", "layers": "3", "tp": 2}]}]})")},
      {"PP2: CP2 (fast) 3 layers -> CP2 (slow) 1", false, parse(R"({"name": "cp2-then-cp2", "pipelines": [
        {"micro_batch_size": 1, "num_micro_batches": 8,
         "stages": [{"ranks": "0-1", "layers": "0-2", "cp": 2}, {"ranks": "2-3", "layers": "3", "cp": 2}]}]})")},
  };
}

constexpr int64_t kSeqLen = 256;
constexpr int64_t kGlobalBatch = 8;  // sequences: 2048 tokens a step

// Documents of exactly kSeqLen random tokens: every row of every micro-batch is full and one
// attention segment, as the cost model assumes for "global batch x sequence length". (A corpus packs
// documents of varying lengths: a pipeline's micro-batches then hold more or fewer tokens than its
// share from step to step, and attention over short documents costs less than over full rows.)
std::string full_rows_dataset(const models::LlamaConfig& config) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("hspmd-planner-bench-" + std::to_string(::getpid()))).string();
  data::TokenDatasetWriter w(dir, {.vocab_size = static_cast<uint32_t>(config.vocab_size), .tokenizer_id = "random"});
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(config.vocab_size) - 1);
  std::vector<int32_t> doc(kSeqLen);
  for (int d = 0; d < 16 * kGlobalBatch; ++d) {
    for (int32_t& t : doc) t = token(rng);
    w.add_document(doc);
  }
  w.finish();
  return dir;
}

// Where one rank's step went (its last step, from the runtime's trace): forward and backward
// passes (their communication included), the communication inside them, and the gradient sync with
// the optimizer (post).
struct Phases {
  double passes = 0, comm = 0, post = 0, step = 0;
  double cp_comm = 0;      // of comm: the CP group's Reshards (K/V gathers, their gradients, the indices)
  double compute_cpu = 0;  // the CPU time the emulated device stretched (runtime::ComputePacer)
};

// The Reshards a CP stage adds per layer (models/llama.cc): the K/V all-gathers (their ".bwd": the
// gradients' reduce-scatters) and the query and key positions the context attention reads.
bool is_cp_reshard(const std::string& name) {
  for (const char* what : {".self_attn.k_all", ".self_attn.v_all", ".token_index", ".kv_index"}) {
    if (name.find(what) != std::string::npos) return true;
  }
  return false;
}

struct Measure {
  double step = 0;            // median step time over the second half of the steps
  std::vector<Phases> ranks;  // per rank of the world (zeros for idle ranks)
};

// Median step time of one strategy on the emulated devices over the second half of its steps: the
// first steps connect the groups and touch fresh memory (they run up to 3x slower than later ones).
Measure measure(const models::LlamaConfig& config, const data::TokenDataset& ds, const sharding::Strategy& st,
                const runtime::EmulatedDevices& devices, int steps) {
  const sharding::AnnotationPlan plan = models::compile_llama_plan(config, st);
  const int world = st.ranks().back() + 1;
  std::vector<double> times;
  Measure m;
  m.ranks.resize(world);
  comm::run_thread_ranks(world, [&](int rank, comm::GroupCache& groups) {
    runtime::DistOptions o;
    o.train.steps = steps;
    o.train.seq_len = kSeqLen;
    o.train.global_batch_tokens = kGlobalBatch * kSeqLen;
    o.train.threads = 1;
    o.device = devices.of(rank);
    o.trace = true;
    const std::vector<int> used = st.ranks();
    if (!std::binary_search(used.begin(), used.end(), rank)) return;  // an idle rank of this strategy
    runtime::DistTrainer t(models::llama(config), ds, plan, o, rank, world, groups);
    double compute_cpu = 0;
    for (int s = 0; s < steps; ++s) {
      t.tracer().clear();
      compute_cpu = t.compute_time().cpu;
      const double seconds = t.step().step_seconds;
      compute_cpu = t.compute_time().cpu - compute_cpu;
      if (rank == used.front() && s >= steps / 2) times.push_back(seconds);
    }
    const runtime::TraceSummary sum = t.tracer().summary();
    auto at = [&](const char* c) { return sum.seconds.count(c) ? sum.seconds.at(c) : 0.0; };
    double cp_comm = 0;
    for (const runtime::TraceEvent& e : t.tracer().events()) {
      if (e.category == "comm" && is_cp_reshard(e.name)) cp_comm += 1e-6 * e.duration_us;
    }
    m.ranks[rank] = {at("compute"), at("comm"), at("optimizer"), sum.window_seconds, cp_comm, compute_cpu};
  }, comm::Millis(60'000));  // a slow emulated rank on a loaded host may exceed the 10 s default
  std::sort(times.begin(), times.end());
  m.step = times[times.size() / 2];
  return m;
}

bool has_cp(const sharding::Strategy& st) {
  for (const sharding::PipelineSpec& pipe : st.pipelines) {
    for (const sharding::StageSpec& stage : pipe.stages) {
      if (stage.cp > 1) return true;
    }
  }
  return false;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// `cp_only`: the strategies with CP stages (and the planner's plan), for iterating on their pricing.
void emulated(int steps, int rounds, bool cp_only) {
  const models::LlamaConfig config = models::LlamaConfig::from_file(kRoot + "/configs/llama-tiny.json");
  const std::string data_dir = full_rows_dataset(config);
  const data::TokenDataset ds = data::TokenDataset::open(data_dir);
  const runtime::EmulatedDevices devices =
      runtime::EmulatedDevices::from_file(kRoot + "/examples/devices/local-hetero-4-dilated.json", 4);
  const resolve::Topology topo = resolve::Topology::from_file(kRoot + "/examples/clusters/local-hetero-4.json");
  std::printf("\n== emulated devices (CPU emulation, not GPUs): %s ==\nhost load average at start: %.1f on %u cores\n",
              devices.describe().c_str(), load_average(), std::thread::hardware_concurrency());
  // The host's speed drifts by 10 to 25% over minutes with what else runs, so each round profiles
  // the host again and predicts its own measurements: a strategy's prediction and measure are taken
  // minutes, not a round's length, apart. (One profile ahead of all rounds put the drift of the
  // whole run between the two; the errors then changed sign from run to run.)
  tuning::ProfilerOptions po;
  po.model = "configs/llama-tiny.json";
  po.devices = &devices;
  po.repeats = std::max(9, 18 / rounds);
  // The CP degrees the strategies below run (CP 4 has more ranks than this host's 2 cores: rank 0's
  // thread CPU time is what it computes, whoever shares its core).
  po.cp_degrees = {2, 4};
  po.progress = [](const std::string& line) { std::fputs(line.c_str(), stderr); };
  auto profile_now = [&](int round) {
    const auto t0 = std::chrono::steady_clock::now();
    const planner::Profile profile = tuning::profile_host(models::Llama(config), po);
    std::printf("round %d: profiled the host in %.1f s, load average %.1f\n", round,
                seconds_since(t0), load_average());
    for (const auto& [t, tp] : profile.kind("fast").tp) {
      std::printf("  fast TP %d: layer fit largest error %.1f%% over %d points\n", t, 100 * tp.fit_error, tp.samples);
    }
    for (const auto& [c, cp] : profile.kind("fast").cp) {
      std::printf("  fast CP %d: layer fit largest error %.1f%% over %d points\n", c, 100 * cp.fit_error, cp.samples);
    }
    return profile;
  };
  planner::Profile profile = profile_now(0);
  planner::PlannerOptions o;
  o.global_batch = kGlobalBatch;
  o.seq_len = kSeqLen;
  o.zero1 = false;
  o.name = "planned";
  const planner::Plan plan = planner::Planner(models::Llama(config), topo, profile, o).plan();
  std::printf("planner (%.3f s): %s", plan.planning_seconds, planner::describe_plan(plan).c_str());

  std::vector<Candidate> all = candidates();
  if (cp_only) std::erase_if(all, [](const Candidate& c) { return !has_cp(c.strategy); });
  all.push_back({"planner's plan", false, plan.strategy});
  // Per strategy, per round: the prediction from that round's profile and the measure.
  std::vector<std::vector<double>> predicted(all.size()), measured(all.size());
  for (int round = 0; round < rounds; ++round) {
    if (round > 0) profile = profile_now(round);
    const planner::CostModel cost(models::Llama(config), topo, profile, {.seq_len = kSeqLen});
    for (size_t i = 0; i < all.size(); ++i) {
      const Measure m = measure(config, ds, all[i].strategy, devices, steps);
      const planner::Prediction pred = cost.predict(all[i].strategy);
      predicted[i].push_back(pred.step_seconds);
      measured[i].push_back(m.step);
      std::fprintf(stderr, "round %d: %s measured %.3f s, predicted %.3f s (%+.1f%%)\n", round, all[i].label.c_str(),
                   m.step, pred.step_seconds, 100 * (pred.step_seconds - m.step) / m.step);
      for (size_t r = 0; r < m.ranks.size(); ++r) {
        const Phases& ph = m.ranks[r];
        std::fprintf(stderr,
                     "  rank %zu: window %.3f s: passes %.3f s (comm %.3f s, of which CP %.3f s), post %.3f s; "
                     "compute %.2f ms CPU\n",
                     r, ph.step, ph.passes, ph.comm, ph.cp_comm, ph.post, 1e3 * ph.compute_cpu);
      }
      for (size_t p = 0; p < pred.pipelines.size(); ++p) {
        const planner::PipelinePrediction& pp = pred.pipelines[p];
        std::fprintf(stderr, "  predicted pipeline %zu: %.3f s + %.3f s sync/optimizer; stages:", p, pp.pipeline_seconds,
                     pp.end_seconds - pp.pipeline_seconds);
        for (const planner::StagePrediction& sp : pp.stages) {
          std::fprintf(stderr, " [compute %.3f tp %.3f cp %.3f p2p %.3f sync %.3f opt %.3f]", sp.compute_seconds,
                       sp.tp_comm_seconds, sp.cp_comm_seconds, sp.p2p_seconds, sp.sync_seconds, sp.optimizer_seconds);
        }
        std::fprintf(stderr, "\n");
      }
    }
  }
  std::printf("host load average after measuring: %.1f\n", load_average());
  // A strategy's figures: its round with the shortest measure (another process's burst only lengthens
  // a step, as in PP4's 5.4 s against 1.3 s once at load 9) and that round's prediction.
  std::printf("\n%-38s %12s %12s %8s\n", "strategy", "predicted s", "measured s", "error");
  std::vector<double> errors, cp_errors, other_errors, best(all.size());
  double best_homogeneous = 1e30;
  std::string best_homogeneous_label;
  for (size_t i = 0; i < all.size(); ++i) {
    const size_t r = std::min_element(measured[i].begin(), measured[i].end()) - measured[i].begin();
    const double p = predicted[i][r];
    best[i] = measured[i][r];
    const double error = std::abs(p - best[i]) / best[i];
    errors.push_back(error);
    (has_cp(all[i].strategy) ? cp_errors : other_errors).push_back(error);
    std::printf("%-38s %12.3f %12.3f %7.1f%%\n", all[i].label.c_str(), p, best[i], 100 * error);
    if (all[i].homogeneous && best[i] < best_homogeneous) {
      best_homogeneous = best[i];
      best_homogeneous_label = all[i].label;
    }
  }
  for (const auto& [what, e] : {std::pair{"strategies", &errors}, std::pair{"strategies without CP", &other_errors},
                                 std::pair{"strategies with CP stages", &cp_errors}}) {
    if (e->empty()) continue;
    std::printf("cost-model error over %zu %s: median %.1f%%, max %.1f%%\n", e->size(), what, 100 * median_of(*e),
                100 * *std::max_element(e->begin(), e->end()));
  }
  std::printf("planner's plan measured %.3f s vs best homogeneous (%s) %.3f s: %.2fx faster\n", best.back(),
              best_homogeneous_label.c_str(), best_homogeneous, best_homogeneous / best.back());
  std::filesystem::remove_all(data_dir);
}

}  // namespace
}  // namespace hspmd

int main(int argc, char** argv) {
  std::string part = "all";
  int steps = 8, rounds = 1;
  bool cp_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--part=", 7) == 0) part = argv[i] + 7;
    if (std::strncmp(argv[i], "--steps=", 8) == 0) steps = std::max(2, std::atoi(argv[i] + 8));
    if (std::strncmp(argv[i], "--rounds=", 9) == 0) rounds = std::max(1, std::atoi(argv[i] + 9));
    if (std::strcmp(argv[i], "--only=cp") == 0) cp_only = true;
  }
  if (part == "all" || part == "paper") hspmd::paper();
  if (part == "all" || part == "emulated") hspmd::emulated(steps, rounds, cp_only);
  return 0;
}
