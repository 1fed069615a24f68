// bf16-only switches against full ones (docs/switching.md), 4 ranks as threads of this process over
// Gloo, one kernel thread each, --precision bf16, for configs/llama-tiny.json and
// bench/llama-16m.json. One step is taken under another strategy and the run goes back (what a
// per-batch strategy choice does for one batch of another length), from TP 2 x PP 2 to a
// heterogeneous strategy (TP 2 next to a 2-stage pipeline, ZeRO-1):
//   full   DistTrainer::switch_to there and back: the float32 weights and both AdamW moments, twice
//   bf16   DistOptions::bf16_switches: the step under the other strategy gets the bf16 weights
//          (params out) and sends its float32 gradients back; weights and moments never move
// Bytes are the plan's (equal to the bytes measured on the wire, runtime_bf16_switch_dist_test);
// times are the slowest rank's moves, best of N rounds, the two ways interleaved round by round.
// The losses of the step under the other strategy are printed side by side (bf16 rounding apart).
//
// Run: build/release/bench_bf16_switch_bench [--rounds=N]   (default 3)
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "bench_data.h"
#include "hspmd/comm/thread_ranks.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/runtime/dist_trainer.h"

namespace hspmd {
namespace {

namespace fs = std::filesystem;
const std::string kRoot = fs::path(__FILE__).parent_path().parent_path().string();

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

// One run of a way: a step under tp2-pp2, the switch, a step under hetero, the switch back.
struct Excursion {
  int64_t bytes = 0;       // on the wire for the one step under hetero
  double seconds = 0;      // the moves (the slowest rank's)
  double loss_there = 0;   // of the step under hetero
};

Excursion run(const models::LlamaConfig& config, const data::TokenDataset& ds, bool bf16_switches) {
  const sharding::AnnotationPlan a = models::compile_llama_plan(config, tp2_pp2(config.num_hidden_layers));
  const sharding::AnnotationPlan b = models::compile_llama_plan(config, hetero(config.num_hidden_layers));
  Excursion out;
  comm::run_thread_ranks(
      4,
      [&](int rank, comm::GroupCache& groups) {
        runtime::DistOptions o;
        o.train.steps = 3;
        o.train.seq_len = 128;
        o.train.global_batch_tokens = 1024;
        o.train.threads = 1;
        o.train.precision = DType::kBFloat16;
        o.plan_name = "tp2-pp2";
        o.bf16_switches = bf16_switches;
        runtime::DistTrainer t(models::llama(config), ds, a, o, rank, 4, groups);
        t.step();  // non-zero moments
        const runtime::SwitchReport there = t.switch_to(b, "hetero");
        const runtime::StepMetrics m = t.step();
        const runtime::SwitchReport back = t.switch_to(a, "tp2-pp2");
        if (rank != 0) return;
        out.loss_there = m.loss;
        if (bf16_switches) {
          out.bytes = m.bf16_switch->params_out_bytes() + m.bf16_switch->grads_back_bytes();
          out.seconds = m.bf16_switch->params_out_seconds + m.bf16_switch->grads_back_seconds;
        } else {
          out.bytes = there.sent_bytes + back.sent_bytes;
          out.seconds = there.bsr_seconds + back.bsr_seconds;
        }
      },
      comm::Millis(120'000));
  return out;
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
  std::printf("one step under hetero (TP2 + PP2, ZeRO-1) from tp2-pp2 and back, bf16, 4 ranks as threads, best of %d "
              "interleaved rounds\n\n",
              rounds);
  std::printf("%-20s %14s %14s %10s %12s %12s %9s %22s\n", "model", "full bytes", "bf16 bytes", "bytes", "full moves",
              "bf16 moves", "time", "loss there full/bf16");
  for (const auto& [label, file] : std::vector<std::pair<std::string, std::string>>{
           {"llama-tiny (0.9M)", kRoot + "/configs/llama-tiny.json"}, {"bench 16M", kRoot + "/bench/llama-16m.json"}}) {
    const models::LlamaConfig config = models::LlamaConfig::from_file(file);
    Excursion full, bf16;
    full.seconds = bf16.seconds = std::numeric_limits<double>::infinity();
    for (int round = 0; round < rounds; ++round) {
      for (const bool way : {false, true}) {
        const Excursion e = run(config, ds, way);
        Excursion& best = way ? bf16 : full;
        best.bytes = e.bytes;
        best.loss_there = e.loss_there;
        best.seconds = std::min(best.seconds, e.seconds);
      }
    }
    char losses[48];
    std::snprintf(losses, sizeof losses, "%.5f / %.5f", full.loss_there, bf16.loss_there);
    std::printf("%-20s %14s %14s %9.3fx %11.4fs %11.4fs %8.3fx %22s\n", label.c_str(), mib(full.bytes).c_str(),
                mib(bf16.bytes).c_str(), static_cast<double>(bf16.bytes) / static_cast<double>(full.bytes), full.seconds,
                bf16.seconds, bf16.seconds / full.seconds, losses);
    std::fflush(stdout);
  }
  return 0;
}
