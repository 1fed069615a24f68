// Vocab-parallel cross-entropy against gathering the logits before the loss (what the Llama plan
// did before: "lm_head_out" all-gathered over TP), and the fused vocab-parallel head (lm_head_loss:
// the logits never whole), side by side in one run.
//   1. Bytes one training step puts on the wire, from the plan report (`hspmd explain`): Llama 32B,
//      Table 9's strategy on 16 H800 + 32 H20, seq_len 4096. The loss path is lm_head_out and its
//      backward when gathered, the row-statistics all-gather when vocab-parallel.
//   2. Measured on this host (CPU, Gloo, ranks as threads, one kernel thread each): TP 2 on a
//      4-layer H 128 model with a 32,000-entry vocabulary (the head dominates, as in a real LLM's
//      last stage), 2048 tokens per step: mean step time (steps 2..N) and each rank's peak memory
//      (allocator high-water mark). All three train the same numbers; the bench prints the
//      largest relative loss difference from the gathered run.
// Run: build/release/bench_vocab_parallel_loss_bench [--steps=N]   (default 4)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "bench_data.h"
#include "hspmd/comm/thread_ranks.h"
#include "hspmd/core/byte_size.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/models/llama.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/specialize/plan_report.h"

namespace hspmd {
namespace {

const std::string kRoot = std::filesystem::path(__FILE__).parent_path().parent_path().string();

// The plan with the logits duplicated over each last stage's TP ranks: lm_head_out all-gathers them.
sharding::AnnotationPlan gathering_logits(sharding::AnnotationPlan plan) {
  const sharding::Annotation split = plan.at("lm_head_out");
  std::vector<sharding::DistState> dup;
  for (const sharding::DistState& ds : split.ds_union()) dup.push_back(sharding::DistState::dup(ds.device_num()));
  plan.set("lm_head_out", split.with_ds_union(std::move(dup)));
  return plan;
}

int64_t step_bytes_of(const specialize::PlanReport& r, const std::string& name) {
  for (const specialize::ReshardGroup& g : r.activations) {
    if (g.display_name() == name) return g.step_bytes();
  }
  return 0;
}

int64_t total_step_bytes(const specialize::PlanReport& r) {
  int64_t n = 0;
  for (const auto& [tier, bytes] : r.step_bytes_by_tier) n += bytes;
  return n;
}

void paper_scale_bytes() {
  const models::LlamaConfig config = models::LlamaConfig::from_file(kRoot + "/configs/llama-32b.json");
  // The head apart: the gathered side needs the logits as a tensor (lm_head_out); the fused head puts
  // the same row statistics on the wire as the vocab-parallel one.
  const models::ModelGraph model = models::Llama(config).build({.fused_head_loss = false});
  const resolve::Topology topo = resolve::Topology::from_file(kRoot + "/examples/clusters/paper-16h800-32h20.json");
  const sharding::AnnotationPlan plan = models::compile_llama_plan(
      config, sharding::Strategy::from_file(kRoot + "/examples/strategies/table9-32b-16h800-32h20.json"));
  const specialize::PlanReportOptions o{specialize::ScheduleKind::k1F1B, 4096, &topo};
  const specialize::PlanReport vocab = specialize::make_plan_report(model, plan, o);
  const specialize::PlanReport gathered = specialize::make_plan_report(model, gathering_logits(plan), o);
  const int64_t gathered_loss = step_bytes_of(gathered, "lm_head_out") + step_bytes_of(gathered, "lm_head_out.bwd");
  const int64_t vocab_loss = step_bytes_of(vocab, "loss (vocab-parallel row statistics)");
  std::printf("1. Llama 32B, table9-32b-16h800-32h20, seq_len 4096: bytes on the wire per training step\n");
  std::printf("   %-22s %18s %18s\n", "", "loss path", "whole step");
  std::printf("   %-22s %18s %18s\n", "logits gathered", format_bytes(gathered_loss).c_str(),
              format_bytes(total_step_bytes(gathered)).c_str());
  std::printf("   %-22s %18s %18s\n", "vocab-parallel", format_bytes(vocab_loss).c_str(),
              format_bytes(total_step_bytes(vocab)).c_str());
  std::printf("   gathered / vocab-parallel: loss path %.0fx, whole step %.2fx\n\n",
              static_cast<double>(gathered_loss) / std::max<int64_t>(vocab_loss, 1),
              static_cast<double>(total_step_bytes(gathered)) / total_step_bytes(vocab));
}

struct Measured {
  double step_seconds = 0;
  std::vector<size_t> peak_bytes;  // per rank
  std::vector<double> losses;      // per step
};

Measured train_tp2(const models::LlamaConfig& config, const data::TokenDataset& ds,
                   const sharding::AnnotationPlan& plan, bool fused_head, int steps) {
  Measured m;
  m.peak_bytes.assign(2, 0);
  std::mutex mutex;
  comm::run_thread_ranks(2, [&](int rank, comm::GroupCache& groups) {
    runtime::DistOptions o;
    o.train.steps = steps;
    o.train.seq_len = 256;
    o.train.global_batch_tokens = 2048;
    o.train.threads = 1;
    o.fused_head_loss = fused_head;
    runtime::DistTrainer t(models::llama(config), ds, plan, o, rank, 2, groups);
    double seconds = 0;
    size_t peak = 0;
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) {
      const runtime::StepMetrics step = t.step();
      if (s >= 1) seconds += step.step_seconds;  // step 1 connects the groups
      peak = std::max(peak, step.peak_bytes);
      losses.push_back(step.loss);
    }
    std::lock_guard<std::mutex> lock(mutex);
    m.peak_bytes[rank] = peak;
    if (rank == 0) {
      m.step_seconds = seconds / (steps - 1);
      m.losses = losses;
    }
  });
  return m;
}

void measured_tp2(int steps) {
  models::LlamaConfig config = models::LlamaConfig::from_file(kRoot + "/configs/llama-tiny.json");
  config.vocab_size = 32000;
  const data::TokenDataset ds = data::TokenDataset::open(bench::prepared_kjv_dataset(kRoot));
  const sharding::AnnotationPlan plan = models::compile_llama_plan(
      config, sharding::Strategy::from_json_text(R"({"name": "tp2", "pipelines": [
        {"micro_batch_size": 8, "num_micro_batches": 1, "stages": [{"ranks": "0-1", "layers": "0-3"}]}]})",
                                                 "bench"));
  const Measured gathered = train_tp2(config, ds, gathering_logits(plan), false, steps);
  const Measured vocab = train_tp2(config, ds, plan, false, steps);
  const Measured fused = train_tp2(config, ds, plan, true, steps);
  double max_rel = 0;
  for (const Measured* m : {&vocab, &fused}) {
    for (size_t s = 0; s < m->losses.size(); ++s) {
      max_rel = std::max(max_rel, std::abs(m->losses[s] - gathered.losses[s]) / std::abs(gathered.losses[s]));
    }
  }
  std::printf("2. measured: TP 2 (2 ranks as threads), llama-tiny with vocab 32000, 2048 tokens/step, %d steps\n", steps);
  std::printf("   %-22s %12s %16s %16s\n", "", "step (s)", "peak rank 0", "peak rank 1");
  for (const auto& [label, m] : {std::pair{"logits gathered", &gathered}, std::pair{"vocab-parallel", &vocab},
                                 std::pair{"vocab-parallel fused", &fused}}) {
    std::printf("   %-22s %12.3f %16s %16s\n", label, m->step_seconds,
                format_bytes(static_cast<double>(m->peak_bytes[0])).c_str(),
                format_bytes(static_cast<double>(m->peak_bytes[1])).c_str());
  }
  std::printf("   gathered / vocab-parallel: step time %.2fx, peak memory %.2fx\n",
              gathered.step_seconds / vocab.step_seconds,
              static_cast<double>(gathered.peak_bytes[0]) / static_cast<double>(vocab.peak_bytes[0]));
  std::printf("   vocab-parallel / fused: step time %.2fx, peak memory %.2fx\n", vocab.step_seconds / fused.step_seconds,
              static_cast<double>(vocab.peak_bytes[0]) / static_cast<double>(fused.peak_bytes[0]));
  std::printf("   losses against the gathered run: largest relative difference %.2e over %d steps\n", max_rel, steps);
}

}  // namespace
}  // namespace hspmd

int main(int argc, char** argv) {
  int steps = 4;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--steps=", 8) == 0) steps = std::max(2, std::atoi(argv[i] + 8));
  }
  hspmd::paper_scale_bytes();
  hspmd::measured_tp2(steps);
  return 0;
}
