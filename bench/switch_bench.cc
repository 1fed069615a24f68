// Graph switching (§7) side by side, 4 ranks as threads of this process over Gloo, one kernel
// thread each, for configs/llama-tiny.json and bench/llama-16m.json. The switch goes from TP 2 x
// PP 2 to a heterogeneous strategy (TP 2 next to a 2-stage pipeline, ZeRO-1) and back, moving the
// float32 weights and both AdamW moments. Three ways, interleaved round by round, best of N:
//   fused     DistTrainer::switch_to: one fused BSR, one message per (sender, receiver) pair,
//             the scheme's heuristics (owned -> local copy; least bytes sent so far)
//   unfused   the paper's baseline: one BSR per tensor, one after the other, lowest owner sends
//   restart   today's alternative without switching: save a sharded checkpoint, drop every
//             communicator, build the trainer for the new plan (specialize, connect) and load the
//             checkpoint under it. Starting new processes is NOT included, so the ratio is a floor.
// Times are the slowest rank's. "busiest" is the most bytes one rank sends in the switch.
//
// Run: build/release/bench_switch_bench [--rounds=N]   (default 3)
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bench_data.h"
#include "hspmd/comm/thread_ranks.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/runtime/dist_trainer.h"

namespace hspmd {
namespace {

namespace fs = std::filesystem;
const std::string kRoot = fs::path(__FILE__).parent_path().parent_path().string();
using Clock = std::chrono::steady_clock;

sharding::Strategy tp2_pp2(int layers) {
  const int half = layers / 2;
  return sharding::Strategy::from_json_text(
      R"({"name": "tp2-pp2", "pipelines": [{"micro_batch_size": 2, "num_micro_batches": 4, "stages": [
         {"ranks": "0-1", "layers": "0-)" + std::to_string(half - 1) + R"("},
         {"ranks": "2-3", "layers": ")" + std::to_string(half) + "-" + std::to_string(layers - 1) + R"("}]}]})",
      "tp2-pp2");
}

sharding::Strategy hetero(int layers) {
  const int half = layers / 2;
  const std::string all = "0-" + std::to_string(layers - 1);
  return sharding::Strategy::from_json_text(
      R"({"name": "hetero", "zero1": true, "pipelines": [
         {"micro_batch_size": 2, "num_micro_batches": 2, "stages": [{"ranks": "0-1", "layers": ")" + all + R"("}]},
         {"micro_batch_size": 1, "num_micro_batches": 4, "stages": [
           {"ranks": "2", "layers": "0-)" + std::to_string(half - 1) + R"("},
           {"ranks": "3", "layers": ")" + std::to_string(half) + "-" + std::to_string(layers - 1) + R"("}]}]})",
      "hetero");
}

struct Best {
  double fused = std::numeric_limits<double>::infinity(), fused_total = fused, unfused = fused, restart = fused;
  int64_t fused_busiest = 0, unfused_busiest = 0, fused_bytes = 0, unfused_bytes = 0;
};
struct Directions {
  Best there, back;  // tp2-pp2 -> hetero, hetero -> tp2-pp2 (no restart measured back)
};

int64_t busiest(const runtime::SwitchReport& r) {
  int64_t most = 0;
  for (const auto& [rank, bytes] : r.sent_by_rank) most = std::max(most, bytes);
  return most;
}

void keep_best(Best& best, const runtime::SwitchReport& f, const runtime::SwitchReport& u) {
  best.fused = std::min(best.fused, f.bsr_seconds);
  best.fused_total = std::min(best.fused_total, f.total_seconds);
  best.unfused = std::min(best.unfused, u.bsr_seconds);
  best.fused_busiest = busiest(f);
  best.unfused_busiest = busiest(u);
  best.fused_bytes = f.sent_bytes;
  best.unfused_bytes = u.sent_bytes;
}

Directions measure(const std::string& config_file, int rounds, const data::TokenDataset& ds) {
  const models::LlamaConfig config = models::LlamaConfig::from_file(config_file);
  const sharding::AnnotationPlan a = models::compile_llama_plan(config, tp2_pp2(config.num_hidden_layers));
  const sharding::AnnotationPlan b = models::compile_llama_plan(config, hetero(config.num_hidden_layers));
  const std::string ckpt = (fs::temp_directory_path() / "hspmd-bench-switch-ckpt").string();
  Directions best;
  std::mutex mutex;
  std::vector<std::vector<double>> restart_seconds(4, std::vector<double>(rounds));  // [rank][round]
  comm::run_thread_ranks(
      4,
      [&](int rank, comm::GroupCache& groups) {
        runtime::DistOptions o;
        o.train.steps = 1000;
        o.train.seq_len = 128;
        o.train.global_batch_tokens = 1024;
        o.train.threads = 1;
        o.plan_name = "tp2-pp2";
        auto t = std::make_unique<runtime::DistTrainer>(config, ds, a, o, rank, 4, groups);
        t->step();  // non-zero moments
        for (int round = 0; round < rounds; ++round) {
          const runtime::SwitchReport f = t->switch_to(b, "hetero", resolve::BsrAlgorithm::kFusedHeuristic);
          const runtime::SwitchReport fb = t->switch_to(a, "tp2-pp2", resolve::BsrAlgorithm::kFusedHeuristic);
          const runtime::SwitchReport u = t->switch_to(b, "hetero", resolve::BsrAlgorithm::kPerTensorLowestOwner);
          const runtime::SwitchReport ub = t->switch_to(a, "tp2-pp2", resolve::BsrAlgorithm::kPerTensorLowestOwner);
          // Checkpoint and restart: what a run without switching does to change strategy.
          t->save(ckpt);
          const auto start = Clock::now();
          t.reset();
          groups.reset(groups.generation() + 1);
          runtime::DistOptions ob = o;
          ob.plan_name = "hetero";
          t = std::make_unique<runtime::DistTrainer>(config, ds, b, ob, rank, 4, groups);
          t->restore(ckpt);
          restart_seconds[rank][round] = std::chrono::duration<double>(Clock::now() - start).count();
          t->switch_to(a, "tp2-pp2", resolve::BsrAlgorithm::kFusedHeuristic);  // back to the start for the next round
          std::lock_guard<std::mutex> lock(mutex);
          if (rank == 0) {
            keep_best(best.there, f, u);
            keep_best(best.back, fb, ub);
          }
        }
      },
      comm::Millis(120'000));
  for (int round = 0; round < rounds; ++round) {
    double slowest = 0;
    for (const auto& per_round : restart_seconds) slowest = std::max(slowest, per_round[round]);
    best.there.restart = std::min(best.there.restart, slowest);
  }
  fs::remove_all(ckpt);
  return best;
}

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace
}  // namespace hspmd

int main(int argc, char** argv) {
  int rounds = 3;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--rounds=", 9) == 0) rounds = std::max(1, std::atoi(argv[i] + 9));
  }
  using namespace hspmd;
  const data::TokenDataset ds = data::TokenDataset::open(bench::prepared_kjv_dataset(kRoot));
  std::printf("graph switch tp2-pp2 -> hetero (TP2 + PP2, ZeRO-1), weights + AdamW moments, 4 ranks as threads, "
              "best of %d interleaved rounds\n\n",
              rounds);
  std::printf("%-40s %10s %12s %10s %12s %9s %9s %22s %22s\n", "model, switch", "fused BSR", "fused total",
              "unfused", "ckpt+restart", "rst/fused", "unf/fused", "busiest fused/unfused", "sent fused/unfused");
  for (const auto& [label, file] : std::vector<std::pair<std::string, std::string>>{
           {"llama-tiny (0.9M)", kRoot + "/configs/llama-tiny.json"}, {"bench 16M", kRoot + "/bench/llama-16m.json"}}) {
    const Directions d = measure(file, rounds, ds);
    for (const auto& [direction, b] : {std::pair<const char*, const Best&>{"  tp2-pp2 -> hetero", d.there},
                                       std::pair<const char*, const Best&>{"  hetero -> tp2-pp2", d.back}}) {
      char restart[48] = "           -          -";
      if (b.restart < std::numeric_limits<double>::infinity()) {
        std::snprintf(restart, sizeof restart, "%11.4fs %8.2fx", b.restart, b.restart / b.fused_total);
      }
      std::printf("%-40s %9.4fs %11.4fs %9.4fs %s %8.2fx %22s %22s\n", (label + direction).c_str(), b.fused,
                  b.fused_total, b.unfused, restart, b.unfused / b.fused,
                  (mib(b.fused_busiest) + " / " + mib(b.unfused_busiest)).c_str(),
                  (mib(b.fused_bytes) + " / " + mib(b.unfused_bytes)).c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}
