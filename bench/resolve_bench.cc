// Resolution at the scale of the paper: Llama 32B (60 layers) on the 48-GPU cluster of Table 7.
//
//   BM_PlanDeduceResolve compile Table 9's 32B/48-device strategy into a plan, deduce the annotations
//                        of the whole 60-layer training graph (forward and backward; the graph is
//                        built once, outside the timed loop), construct the pipelines and resolve
//                        every Reshard (activations per pipeline at seq_len 4096), gradient sync
//                        and ZeRO-1 parameter gather: specialize::make_plan_report, what `hspmd
//                        explain --strategy` prints.
//   BM_FusedSwitch       the fused BSR of params + Adam states between two shipped 48-device
//                        strategies (Table 9 32B 16 H800 + 32 H20 -> Table 12 C4), with heuristics
//                        (/1) and per-tensor lowest-owner (/0).
// Goal: < 1 s each, single core. Run: build/<dir>/bench_resolve
#include <benchmark/benchmark.h>

#include <filesystem>

#include "hspmd/models/llama.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/resolve/fused_bsr.h"
#include "hspmd/resolve/resolver.h"
#include "hspmd/resolve/topology.h"
#include "hspmd/specialize/plan_report.h"

namespace {

using namespace hspmd;

const std::string kRoot = std::filesystem::path(__FILE__).parent_path().parent_path().string();

struct Setup {
  models::LlamaConfig config = models::LlamaConfig::from_file(kRoot + "/configs/llama-32b.json");
  resolve::Topology topo = resolve::Topology::from_file(kRoot + "/examples/clusters/paper-16h800-32h20.json");
  sharding::Strategy a = sharding::Strategy::from_file(kRoot + "/examples/strategies/table9-32b-16h800-32h20.json");
  sharding::Strategy b = sharding::Strategy::from_file(kRoot + "/examples/strategies/table12-c4-16h800-32h20.json");
};

const Setup& setup() {
  static const Setup s;
  return s;
}

void BM_PlanDeduceResolve(benchmark::State& state) {
  const Setup& s = setup();
  static const models::ModelGraph model = models::Llama(s.config).build({});
  specialize::PlanReport report;
  for (auto _ : state) {
    sharding::AnnotationPlan plan = models::compile_llama_plan(s.config, s.a);
    report = specialize::make_plan_report(model, plan, {specialize::ScheduleKind::k1F1B, 4096, &s.topo});
    benchmark::DoNotOptimize(report);
  }
  int64_t step_bytes = 0;
  for (const auto& [tier, bytes] : report.step_bytes_by_tier) step_bytes += bytes;
  state.counters["graph_ops"] = static_cast<double>(model.graph.num_ops());
  state.counters["reshards"] = static_cast<double>(report.reshards_total);
  state.counters["grad_syncs"] = static_cast<double>(models::llama_parameters(s.config).size());
  state.counters["step_GiB"] = static_cast<double>(step_bytes) / (1 << 30);
}
BENCHMARK(BM_PlanDeduceResolve)->Unit(benchmark::kMillisecond);

void BM_FusedSwitch(benchmark::State& state) {
  const Setup& s = setup();
  const bool heuristics = state.range(0) == 1;
  int64_t bytes = 0, messages = 0, busiest = 0;
  for (auto _ : state) {
    sharding::AnnotationPlan pa = models::compile_llama_plan(s.config, s.a);
    sharding::AnnotationPlan pb = models::compile_llama_plan(s.config, s.b);
    std::vector<resolve::FusedTensor> tensors;
    for (const models::LlamaParam& p : models::llama_parameters(s.config)) {
      tensors.push_back({p.name, p.shape, pa.at(p.name), pb.at(p.name), 4});
      tensors.push_back({p.name + ".exp_avg", p.shape, pa.optimizer_state(p.name), pb.optimizer_state(p.name), 4});
      tensors.push_back({p.name + ".exp_avg_sq", p.shape, pa.optimizer_state(p.name), pb.optimizer_state(p.name), 4});
    }
    resolve::FusedBsrOptions options;
    if (!heuristics) options = {resolve::BsrPolicy::kLowestOwner, false, {}};
    resolve::FusedBsr f = resolve::plan_fused_bsr(tensors, &s.topo, options);
    bytes = f.total_bytes();
    messages = static_cast<int64_t>(f.messages().size());
    busiest = 0;
    for (const auto& [dev, b] : f.bytes_sent) busiest = std::max(busiest, b);
    benchmark::DoNotOptimize(f);
  }
  state.counters["GiB_sent"] = static_cast<double>(bytes) / (1 << 30);
  state.counters["busiest_GiB"] = static_cast<double>(busiest) / (1 << 30);
  state.counters["messages"] = static_cast<double>(messages);
}
BENCHMARK(BM_FusedSwitch)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
