// `hspmd explain --strategy S.json --model CONFIG [--cluster C.json] [--seq-len 4096]
//  [--schedule 1f1b|gpipe]`: what a strategy does, for a person to check by eye
// (specialize/plan_report.h): the model's graph (with backward) is annotated by the strategy's plan
// and deduced; then the pipelines found in it (A.2) with each stage's ranks, layers, TP degree and
// schedule; every Reshard that is not the identity everywhere, forward and backward, with its
// classification and per device its comm ops and bytes (identical Reshards of different layers
// summarized once: "model.layers.{0..59}.attn_out (60x)"); the gradient syncs and ZeRO-1 parameter
// gathers; and the bytes of one step per link tier of the cluster.
//
//   hspmd explain --strategy examples/strategies/local-hetero-4.json --model configs/llama-tiny.json --seq-len 64
//
// With --cluster C.json --profile P.json it also prints the cost model's prediction
// (planner/cost_model.h): "predicted step time: X s" and the memory of every rank.
//
// `hspmd explain --switch A.json B.json --model CONFIG --cluster C.json [--states params|params+adam]
//  [--no-heuristics]`: the fused BSR (§7) that moves every parameter of the model (and its Adam states)
// from strategy A's plan to strategy B's — per sender the bytes on each link tier, per
// (sender, receiver) pair the bytes — computed from names and shapes only, no tensor allocated.
//
//   hspmd explain --switch examples/strategies/table12-c5-16h800-24h20.json
//       examples/strategies/table12-c6-15h800-24h20.json --model configs/llama-32b.json
//       --cluster examples/clusters/paper-16h800-32h20.json --states params+adam   (one line)
//
// --states bf16-params prints instead the two moves of each step under B while A keeps the master
// state (switching/bf16_switch_plan.h: bf16 parameters out, float32 gradients back), beside the full
// switch of weights and Adam moments.
//
// --no-heuristics plans one BSR per tensor with the lowest-rank owner sending (slices a receiver
// already holds are still copied locally), for comparison;
// --dead 15 keeps failed ranks from sending (their shards come from data-parallel replicas).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hspmd/core/byte_size.h"
#include "hspmd/core/error.h"
#include "hspmd/models/model_factory.h"
#include "hspmd/planner/cost_model.h"
#include "hspmd/planner/profile.h"
#include "hspmd/resolve/fused_bsr.h"
#include "hspmd/resolve/topology.h"
#include "hspmd/sharding/strategy.h"
#include "hspmd/specialize/plan_report.h"
#include "hspmd/switching/bf16_switch_plan.h"
#include "hspmd/switching/switch_plan.h"

namespace hspmd::cli {

namespace {

struct ExplainOptions {
  std::string strategy;                   // --strategy S.json
  int64_t seq_len = 4096;
  std::string schedule = "1f1b";
  std::vector<std::string> switch_files;  // A.json B.json
  std::string model;
  std::string cluster;
  std::string states = "params";  // or "params+adam"
  bool no_heuristics = false;
  std::string bsr_algorithm = "fused";
  std::vector<int> dead;  // failed ranks: they hold data in A but cannot send
  std::string profile;    // --profile P.json: add the cost model's predicted step time and memory
  double grad_bucket_mb = 25;  // --grad-bucket-mb: the buckets the cost model's overlap assumes
};

void run_strategy(const ExplainOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  const std::shared_ptr<const models::Model> model = models::load_model(o.model);
  const sharding::Strategy st = sharding::Strategy::from_file(o.strategy);
  std::optional<resolve::Topology> topo;
  if (!o.cluster.empty()) topo = resolve::Topology::from_file(o.cluster);
  const models::ModelGraph graph = model->build({});
  const sharding::AnnotationPlan plan = model->compile_plan(st);
  const specialize::PlanReport report = specialize::make_plan_report(
      graph, plan, {specialize::parse_schedule_kind(o.schedule), o.seq_len, topo ? &*topo : nullptr});
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::cout << "strategy " << st.name << " (" << o.strategy << "), model " << o.model << " ("
            << model->num_layers() << " layers, " << graph.graph.num_ops() << " ops with backward), "
            << st.ranks().size() << " ranks, ZeRO " << st.zero << "\n"
            << specialize::to_string(report) << "explained in " << ms << " ms\n";
  if (!o.profile.empty()) {
    HSPMD_CHECK(topo.has_value()) << "explain --profile needs --cluster C.json (device kinds, memory, links)";
    const planner::Profile profile = planner::Profile::from_file(o.profile);
    const planner::CostModel cost(*model, *topo, profile,
                                  {.seq_len = o.seq_len,
                                   .schedule = specialize::parse_schedule_kind(o.schedule),
                                   .grad_bucket_mb = o.grad_bucket_mb});
    std::cout << "cost model (profile " << o.profile << ": " << profile.source << ")\n"
              << planner::to_string(cost.predict(st));
  }
}

// "  intra-node 1.00 MiB (1048576 bytes), inter-node 0 B (0 bytes)"
std::string tier_bytes(const std::map<resolve::LinkTier, int64_t>& by_tier) {
  std::string out;
  for (resolve::LinkTier t : {resolve::LinkTier::kIntraNode, resolve::LinkTier::kInterNode}) {
    const int64_t bytes = by_tier.count(t) ? by_tier.at(t) : 0;
    out += std::string(out.empty() ? "" : ", ") + std::string(resolve::link_tier_name(t)) + " " +
           format_bytes(bytes) + " (" + std::to_string(bytes) + " bytes)";
  }
  return out;
}

// --states bf16-params: the two moves of every step under B while A keeps the master state
// (switching/bf16_switch_plan.h), beside the full switch A -> B of weights and Adam moments.
void print_bf16_switch(const ExplainOptions& o, const sharding::Strategy& sa, const sharding::Strategy& sb,
                       const std::vector<switching::ParamLayout>& a, const std::vector<switching::ParamLayout>& b,
                       const resolve::Topology& topo) {
  HSPMD_CHECK(!o.no_heuristics && o.bsr_algorithm == "fused" && o.dead.empty())
      << "--states bf16-params plans the fused BSR of a healthy run: leave out --no-heuristics, --bsr-algorithm and --dead";
  const switching::Bf16SwitchPlan bf16 = switching::plan_bf16_switch(a, b, &topo);
  const switching::SwitchPlan full = switching::plan_switch(a, b, {.optimizer_states = true, .topology = &topo});
  auto line = [](const char* what, const switching::SwitchPlan& p) {
    std::cout << "  " << what << ": " << p.bsr.messages().size() << " messages, " << format_bytes(p.bsr.total_bytes())
              << " (" << p.bsr.total_bytes() << " bytes): " << tier_bytes(p.sent_by_tier) << "; local copies "
              << format_bytes(p.local_copy_bytes) << "\n";
  };
  std::cout << "switch " << sa.name << " -> " << sb.name << ", states bf16-params: float32 weights and Adam moments "
            << "stay under " << sa.name << "; every step under " << sb.name << " moves\n";
  line("params out (bf16, 2 bytes an element)", bf16.params_out);
  line("grads back (float32, 4 bytes an element)", bf16.grads_back);
  std::cout << "  per step: " << format_bytes(bf16.step_bytes()) << " (" << bf16.step_bytes() << " bytes)\n"
            << "the full switch instead (params+adam, float32, once each way):\n";
  line("weights and Adam moments", full);
}

void run_switch(const ExplainOptions& o) {
  HSPMD_CHECK(o.switch_files.size() == 2) << "--switch needs two strategy files, A.json B.json";
  HSPMD_CHECK(o.states == "params" || o.states == "params+adam" || o.states == "bf16-params")
      << "--states must be 'params', 'params+adam' or 'bf16-params', got '" << o.states << "'";
  HSPMD_CHECK(!o.cluster.empty()) << "--switch needs --cluster C.json (link bandwidths decide the senders)";
  const auto start = std::chrono::steady_clock::now();
  const std::shared_ptr<const models::Model> model = models::load_model(o.model);
  const resolve::Topology topo = resolve::Topology::from_file(o.cluster);
  const sharding::Strategy sa = sharding::Strategy::from_file(o.switch_files[0]);
  const sharding::Strategy sb = sharding::Strategy::from_file(o.switch_files[1]);
  const sharding::AnnotationPlan a = model->compile_plan(sa);
  const sharding::AnnotationPlan b = model->compile_plan(sb);
  for (const auto* st : {&sa, &sb}) {
    for (int r : st->ranks()) {
      HSPMD_CHECK(r < topo.num_devices()) << "strategy " << st->name << " uses rank " << r << " but cluster "
                                          << topo.name() << " has " << topo.num_devices() << " devices";
    }
  }
  const std::vector<std::pair<std::string, Shape>> params = models::parameter_shapes(*model);
  if (o.states == "bf16-params") return print_bf16_switch(o, sa, sb, switching::param_layouts(a, params),
                                                          switching::param_layouts(b, params), topo);
  switching::SwitchOptions options;
  options.optimizer_states = o.states == "params+adam";
  options.topology = &topo;
  HSPMD_CHECK(!o.no_heuristics || o.bsr_algorithm == "fused")
      << "--no-heuristics is --bsr-algorithm per-tensor-lowest-owner: give one of them";
  options.algorithm = o.no_heuristics ? resolve::BsrAlgorithm::kPerTensorLowestOwner
                                      : resolve::parse_bsr_algorithm(o.bsr_algorithm);
  options.dead = o.dead;
  const switching::SwitchPlan plan =
      switching::plan_switch(switching::param_layouts(a, params), switching::param_layouts(b, params), options);
  const resolve::FusedBsr& bsr = plan.bsr;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  std::cout << "switch " << sa.name << " -> " << sb.name << "\n"
            << "model " << o.model << ": " << params.size() << " parameters, states "
            << o.states << " (" << plan.tensors.size() << " tensors, float32), cluster " << topo.name() << "\n"
            << "scheme: "
            << resolve::bsr_algorithm_name(options.algorithm) << " ("
            << (options.algorithm == resolve::BsrAlgorithm::kFusedHeuristic
                    ? "one BSR over every tensor, heuristics: owned -> local copy; fastest link; least bytes sent"
                : options.algorithm == resolve::BsrAlgorithm::kPerTensorHeuristic
                    ? "one BSR per tensor, heuristics within each: owned -> local copy; fastest link; least bytes sent"
                    : "one BSR per tensor: owned -> local copy, else the lowest-rank owner sends")
            << ")"
            << "\n"
            << "table entries " << bsr.table.entries().size() << ", messages " << bsr.messages().size()
            << ", sent " << format_bytes(bsr.total_bytes()) << " (" << bsr.total_bytes()
            << " bytes), local copies " << format_bytes(plan.local_copy_bytes) << "\n";
  for (resolve::LinkTier t : {resolve::LinkTier::kIntraNode, resolve::LinkTier::kInterNode}) {
    const int64_t bytes = plan.sent_by_tier.count(t) ? plan.sent_by_tier.at(t) : 0;
    std::cout << "  " << resolve::link_tier_name(t) << ": " << format_bytes(bytes) << " (" << bytes << " bytes)\n";
  }
  std::cout << "busiest sender " << format_bytes(plan.busiest_sender_bytes) << "; planned in " << ms
            << " ms\n\n";
  std::cout << "per sender        intra-node      inter-node           total\n";
  for (const auto& [dev, tiers] : plan.sent_by) {
    const int64_t intra = tiers.count(resolve::LinkTier::kIntraNode) ? tiers.at(resolve::LinkTier::kIntraNode) : 0;
    const int64_t inter = tiers.count(resolve::LinkTier::kInterNode) ? tiers.at(resolve::LinkTier::kInterNode) : 0;
    char line[160];
    std::snprintf(line, sizeof line, "  rank %-4d %15s %15s %15s  (%s)\n", dev, format_bytes(intra).c_str(),
                  format_bytes(inter).c_str(), format_bytes(intra + inter).c_str(),
                  topo.device(dev).type.c_str());
    std::cout << line;
  }
  std::map<std::pair<int, int>, std::pair<int64_t, int>> pairs;  // merged across tensors when unfused
  for (const resolve::BsrMessage& m : bsr.messages()) {
    auto& [bytes, count] = pairs[{m.sender, m.receiver}];
    bytes += m.bytes;
    ++count;
  }
  std::cout << "\nper pair (sender -> receiver: bytes, messages, link)\n";
  for (const auto& [pair, v] : pairs) {
    std::cout << "  " << pair.first << " -> " << pair.second << ": " << format_bytes(v.first) << " ("
              << v.first << " bytes), " << v.second << (v.second == 1 ? " message, " : " messages, ")
              << resolve::link_tier_name(topo.tier(pair.first, pair.second)) << "\n";
  }
}

}  // namespace

void add_explain_command(CLI::App& app) {
  auto opts = std::make_shared<ExplainOptions>();
  CLI::App* cmd = app.add_subcommand(
      "explain", "Explain a strategy's pipelines, Reshards and bytes (--strategy) or a strategy switch (--switch)");
  cmd->add_option("--strategy", opts->strategy, "strategy file S.json: pipelines, resolution, bytes per step");
  cmd->add_option("--seq-len", opts->seq_len, "tokens per sequence (--strategy)")->capture_default_str();
  cmd->add_option("--schedule", opts->schedule, "pipeline schedule: 1f1b or gpipe (--strategy)")->capture_default_str();
  cmd->add_option("--switch", opts->switch_files, "two strategy files: from A.json to B.json")->expected(2);
  cmd->add_option("--model", opts->model, "model config.json (Hugging Face style)")->required();
  cmd->add_option("--cluster", opts->cluster, "cluster spec JSON (devices, link bandwidths)");
  cmd->add_option("--profile", opts->profile,
                  "profile JSON (--strategy, with --cluster): print the predicted step time and memory per rank");
  cmd->add_option("--grad-bucket-mb", opts->grad_bucket_mb,
                  "with --profile: the gradient buckets of `hspmd train --grad-bucket-mb`, how much of the gradient "
                  "sync the prediction hides behind the backward passes (0: none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--states", opts->states,
                  "what moves: params, params+adam, or bf16-params (per step: bf16 weights out, float32 gradients "
                  "back, beside the full switch)")->capture_default_str();
  cmd->add_flag("--no-heuristics", opts->no_heuristics,
                "one BSR per tensor, lowest-rank owner sends (= --bsr-algorithm per-tensor-lowest-owner)");
  cmd->add_option("--bsr-algorithm", opts->bsr_algorithm,
                  "--switch: fused (one BSR over every tensor, heuristics), per-tensor (one per tensor, "
                  "heuristics) or per-tensor-lowest-owner")
      ->capture_default_str();
  cmd->add_option("--dead", opts->dead, "failed ranks that cannot send (elastic recovery), e.g. --dead 15")
      ->delimiter(',');
  cmd->callback([opts] {
    HSPMD_CHECK(opts->strategy.empty() != opts->switch_files.empty())
        << "explain: give either --strategy S.json or --switch A.json B.json";
    if (!opts->strategy.empty()) {
      run_strategy(*opts);
    } else {
      run_switch(*opts);
    }
  });
}

}  // namespace hspmd::cli
