// `hspmd simulate --model CONFIG --cluster C.json --profile P.json --trace T.json [--strategy S.json ...]
//  [--strategy-for-max-len L:S.json ...] [--json OUT]`: replays the trace (ranks lost and returned,
// each step's batch) with the cost model and prints, per policy, the predicted total time, tokens/s,
// time in switches and recovery (planner/simulator.h, docs/planner.md "Simulator").
//
//   hspmd simulate --model configs/llama-32b.json --cluster examples/clusters/paper-16h800-32h20.json
//       --profile examples/profiles/paper-h800-h20-llama-32b.json
//       --trace examples/traces/paper-h20-nodes-lost-and-back.json
//       --strategy examples/strategies/table12-c4-16h800-32h20.json                 (one line)
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "hspmd/core/atomic_file.h"
#include "hspmd/core/error.h"
#include "hspmd/models/model_factory.h"
#include "hspmd/planner/length_strategies.h"
#include "hspmd/planner/profile.h"
#include "hspmd/planner/run_trace.h"
#include "hspmd/planner/simulator.h"
#include "hspmd/resolve/topology.h"
#include "hspmd/sharding/strategy.h"

namespace hspmd::cli {

namespace {

struct SimulateOptions {
  std::string model, cluster, profile, trace, json;
  std::vector<std::string> strategies, length_strategies;
  bool no_planner = false;
  double replan_tolerance = 0.05;
  int methods_per_interval = 2;
};

void run_simulate(const SimulateOptions& o) {
  const std::shared_ptr<const models::Model> model = models::load_model(o.model);
  const resolve::Topology topo = resolve::Topology::from_file(o.cluster);
  const planner::Profile profile = planner::Profile::from_file(o.profile);
  const planner::RunTrace trace = planner::RunTrace::from_file(o.trace, topo.num_devices());
  HSPMD_CHECK(!o.no_planner || !o.strategies.empty() || !o.length_strategies.empty())
      << "--no-planner leaves nothing to simulate: give --strategy or --strategy-for-max-len";
  std::cout << "simulating " << trace.name << " (" << o.trace << "): " << trace.steps << " steps, "
            << (trace.mixed_lengths() ? "mixed lengths up to " + std::to_string(trace.seq_len) + " tokens"
                                      : std::to_string(trace.global_batch) + " x " + std::to_string(trace.seq_len) +
                                            " tokens a step")
            << ", " << trace.events.size() << " events; " << o.model << " on " << topo.name() << " ("
            << topo.num_devices() << " devices), profile " << o.profile << "\n";
  const planner::Simulator sim(*model, topo, profile, trace,
                               {.replan_tolerance = o.replan_tolerance, .methods_per_interval = o.methods_per_interval});
  std::vector<planner::PolicyRun> runs;
  if (!o.no_planner) runs = sim.planner_runs();
  for (const std::string& path : o.strategies) runs.push_back(sim.fixed_run(sharding::Strategy::from_file(path)));
  if (!o.length_strategies.empty()) {
    std::vector<planner::LengthStrategy> set;
    std::string name = "per max length:";
    for (const std::string& spec : o.length_strategies) {
      set.push_back(planner::parse_length_strategy(spec));
      name += " " + set.back().strategy.name;
    }
    runs.push_back(sim.length_set_run(std::move(set), name));
  }
  for (const planner::PolicyRun& r : runs) {
    for (const std::string& line : r.log) std::cout << r.name << ": " << line << "\n";
  }
  std::cout << planner::comparison_table(runs);
  if (!o.json.empty()) {
    const std::string text = planner::comparison_json(trace, runs);
    AtomicFile out(o.json);
    out.write(text.data(), text.size());
    out.commit();
    std::cout << "wrote " << o.json << "\n";
  }
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto opts = std::make_shared<SimulateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "simulate", "Replay a trace of rank losses, returns and batches with the cost model; compare policies");
  cmd->add_option("--model", opts->model, "model config.json (Hugging Face style)")->required();
  cmd->add_option("--cluster", opts->cluster, "cluster spec JSON (devices, memory, link bandwidths)")->required();
  cmd->add_option("--profile", opts->profile, "profile JSON from `hspmd profile` (or examples/profiles/)")->required();
  cmd->add_option("--trace", opts->trace,
                  "trace JSON: steps, global_batch or mixed-length batches, events (lose/return ranks before a "
                  "step), checkpoint (examples/traces/, docs/planner.md)")
      ->required();
  cmd->add_option("--strategy", opts->strategies,
                  "a fixed strategy to compare (repeatable): after a loss it drops the pipelines that lost a rank")
      ->allow_extra_args(false);
  cmd->add_option("--strategy-for-max-len", opts->length_strategies,
                  "MAXLEN:STRATEGY.json (repeatable, mixed lengths): one set of strategies, one chosen per batch")
      ->allow_extra_args(false);
  cmd->add_flag("--no-planner", opts->no_planner, "leave out the planner's policy (compare the given strategies only)");
  cmd->add_option("--replan-tolerance", opts->replan_tolerance,
                  "re-plans this much slower than the fastest may win by moving less state")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--methods-per-interval", opts->methods_per_interval,
                  "mixed lengths: parallel methods one length interval of the planner may combine")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--json", opts->json, "also write the comparison (and each policy's log) to this JSON file");
  cmd->callback([opts] { run_simulate(*opts); });
}

}  // namespace hspmd::cli
