// hspmd.plan(...) and hspmd.explain_switch(a, b, ...): the structured forms of `hspmd plan` (the
// planner's strategy for a model on a cluster, with its predicted step time and memory per rank)
// and `hspmd explain --switch` (the fused BSR that moves a run's state from one strategy to
// another: bytes per sender and link tier, per (sender, receiver) pair; or, for a bf16-only switch,
// each step's two moves). They call what the CLI
// calls (planner::Planner, switching::plan_switch) with the same options; str() of a result is
// the CLI's text for it.
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "hspmd/core/error.h"
#include "hspmd/models/model.h"
#include "hspmd/planner/planner.h"
#include "hspmd/planner/profile.h"
#include "hspmd/resolve/fused_bsr.h"
#include "hspmd/resolve/topology.h"
#include "hspmd/sharding/strategy.h"
#include "hspmd/specialize/schedule.h"
#include "hspmd/switching/bf16_switch_plan.h"
#include "hspmd/switching/switch_plan.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace hspmd::python {

namespace {

// ---- hspmd.plan ----

planner::Plan plan(const models::Model& model, const resolve::Topology& cluster, const planner::Profile& profile,
                   int64_t global_batch, int64_t seq_len, const std::string& schedule, bool zero1,
                   const std::vector<int>& micro_batch_sizes, const std::vector<int>& cp_degrees,
                   const std::vector<int>& ranks, const std::optional<sharding::Strategy>& previous, double time_limit,
                   const std::string& name) {
  // As `hspmd plan` sets the planner up (cli/plan.cc).
  HSPMD_CHECK(global_batch > 0) << "--global-batch N (sequences per step) is required without --data";
  HSPMD_CHECK(!previous || !ranks.empty()) << "--previous needs --ranks: the ranks available to the new plan";
  planner::PlannerOptions po;
  po.global_batch = global_batch;
  po.seq_len = seq_len;
  po.zero1 = zero1;
  po.schedule = specialize::parse_schedule_kind(schedule);
  po.micro_batch_sizes = micro_batch_sizes;
  po.cp_degrees = cp_degrees;
  po.time_limit_seconds = time_limit;
  po.name = name.empty() ? "planned-" + std::to_string(global_batch) + "x" + std::to_string(seq_len) : name;
  po.devices = ranks;
  const planner::Planner planner(model, cluster, profile, po);
  return previous ? planner.replan(*previous, ranks) : planner.plan();
}

// ---- hspmd.explain_switch ----

struct SenderBytes {
  int rank = 0;
  std::string device;  // the cluster's device kind
  std::map<std::string, int64_t> bytes_by_tier;
  int64_t bytes = 0;
};

struct PairBytes {
  int sender = 0, receiver = 0;
  int64_t bytes = 0;
  int messages = 0;
  std::string tier;
};

struct SwitchExplanation {
  std::string source, target;  // strategy names
  std::string states;          // "params" or "params+adam"; a bf16-params move: "bf16 params" or "float32 grads"
  std::string algorithm;
  int tensors = 0, table_entries = 0, messages = 0;
  int64_t sent_bytes = 0, local_copy_bytes = 0, busiest_sender_bytes = 0;
  std::map<std::string, int64_t> sent_by_tier;
  std::vector<SenderBytes> senders;  // ascending rank
  std::vector<PairBytes> pairs;      // ascending (sender, receiver)
};

// states="bf16-params": the two moves of every step under b while a keeps the master state, beside
// the full switch of weights and Adam moments (what `hspmd explain --switch --states bf16-params` prints).
struct Bf16SwitchExplanation {
  std::string source, target;
  std::string states = "bf16-params";
  SwitchExplanation params_out, grads_back, full;
  int64_t step_bytes = 0;
};

SwitchExplanation explanation_of(const switching::SwitchPlan& plan, const sharding::Strategy& sa,
                                 const sharding::Strategy& sb, const resolve::Topology& topo,
                                 const std::string& states, resolve::BsrAlgorithm algorithm) {
  SwitchExplanation e;
  e.source = sa.name;
  e.target = sb.name;
  e.states = states;
  e.algorithm = std::string(resolve::bsr_algorithm_name(algorithm));
  e.tensors = static_cast<int>(plan.tensors.size());
  e.table_entries = static_cast<int>(plan.bsr.table.entries().size());
  e.messages = static_cast<int>(plan.bsr.messages().size());
  e.sent_bytes = plan.bsr.total_bytes();
  e.local_copy_bytes = plan.local_copy_bytes;
  e.busiest_sender_bytes = plan.busiest_sender_bytes;
  for (const auto& [tier, bytes] : plan.sent_by_tier) e.sent_by_tier[std::string(resolve::link_tier_name(tier))] = bytes;
  for (const auto& [dev, tiers] : plan.sent_by) {
    SenderBytes s;
    s.rank = dev;
    s.device = topo.device(dev).type;
    for (const auto& [tier, bytes] : tiers) {
      s.bytes_by_tier[std::string(resolve::link_tier_name(tier))] = bytes;
      s.bytes += bytes;
    }
    e.senders.push_back(std::move(s));
  }
  std::map<std::pair<int, int>, std::pair<int64_t, int>> pairs;  // merged across tensors when unfused
  for (const resolve::BsrMessage& m : plan.bsr.messages()) {
    auto& [bytes, count] = pairs[{m.sender, m.receiver}];
    bytes += m.bytes;
    ++count;
  }
  for (const auto& [p, v] : pairs) {
    e.pairs.push_back(
        {p.first, p.second, v.first, v.second, std::string(resolve::link_tier_name(topo.tier(p.first, p.second)))});
  }
  return e;
}

std::variant<SwitchExplanation, Bf16SwitchExplanation> explain_switch(
    const sharding::Strategy& sa, const sharding::Strategy& sb, const models::Model& model,
    const resolve::Topology& topo, const std::string& states, const std::string& algorithm,
    const std::vector<int>& dead) {
  // As `hspmd explain --switch` computes it (cli/explain.cc).
  HSPMD_CHECK(states == "params" || states == "params+adam" || states == "bf16-params")
      << "--states must be 'params', 'params+adam' or 'bf16-params', got '" << states << "'";
  const sharding::AnnotationPlan a = model.compile_plan(sa);
  const sharding::AnnotationPlan b = model.compile_plan(sb);
  for (const auto* st : {&sa, &sb}) {
    for (int r : st->ranks()) {
      HSPMD_CHECK(r < topo.num_devices()) << "strategy " << st->name << " uses rank " << r << " but cluster "
                                          << topo.name() << " has " << topo.num_devices() << " devices";
    }
  }
  const std::vector<std::pair<std::string, Shape>> params = models::parameter_shapes(model);
  const std::vector<switching::ParamLayout> from = switching::param_layouts(a, params);
  const std::vector<switching::ParamLayout> to = switching::param_layouts(b, params);
  if (states == "bf16-params") {
    HSPMD_CHECK(algorithm == "fused" && dead.empty())
        << "states='bf16-params' plans the fused BSR of a healthy run: leave out algorithm= and dead=";
    const switching::Bf16SwitchPlan bf16 = switching::plan_bf16_switch(from, to, &topo);
    const switching::SwitchPlan full = switching::plan_switch(from, to, {.optimizer_states = true, .topology = &topo});
    const resolve::BsrAlgorithm fused = resolve::BsrAlgorithm::kFusedHeuristic;
    return Bf16SwitchExplanation{.source = sa.name,
                                 .target = sb.name,
                                 .params_out = explanation_of(bf16.params_out, sa, sb, topo, "bf16 params", fused),
                                 .grads_back = explanation_of(bf16.grads_back, sa, sb, topo, "float32 grads", fused),
                                 .full = explanation_of(full, sa, sb, topo, "params+adam", fused),
                                 .step_bytes = bf16.step_bytes()};
  }
  switching::SwitchOptions options;
  options.optimizer_states = states == "params+adam";
  options.topology = &topo;
  options.algorithm = resolve::parse_bsr_algorithm(algorithm);
  options.dead = dead;
  return explanation_of(switching::plan_switch(from, to, options), sa, sb, topo, states, options.algorithm);
}

}  // namespace

void bind_plan(nb::module_& m) {
  nb::class_<planner::Plan>(m, "Plan", "The planner's result: the result of hspmd.plan.")
      .def_ro("strategy", &planner::Plan::strategy, "The strategy it chose (what `hspmd plan --out` writes).")
      .def_ro("prediction", &planner::Plan::prediction, "The cost model's prediction for it.")
      .def_ro("idle", &planner::Plan::idle, "Why each usable rank left out is left out.")
      .def_ro("candidates", &planner::Plan::candidates, "Pipeline configurations generated.")
      .def_ro("candidates_solved", &planner::Plan::candidates_solved, "Of them, solved at level 2.")
      .def_ro("milps", &planner::Plan::milps, "Integer programs solved.")
      .def_ro("moved_bytes", &planner::Plan::moved_bytes, "With previous=: state the ranks fetch.")
      .def_ro("planning_seconds", &planner::Plan::planning_seconds)
      .def_ro("complete", &planner::Plan::complete, "False when time_limit stopped the search.")
      .def("__str__", [](const planner::Plan& p) { return planner::describe_plan(p) + planner::to_string(p.prediction); });
  m.def("plan", &plan, "model"_a, "cluster"_a, "profile"_a, "global_batch"_a, "seq_len"_a, "schedule"_a = "1f1b",
        "zero1"_a = true, "micro_batch_sizes"_a = std::vector<int>{}, "cp_degrees"_a = std::vector<int>{},
        "ranks"_a = std::vector<int>{}, "previous"_a = nb::none(), "time_limit"_a = 0.0, "name"_a = "",
        "`hspmd plan` as a result object: the fastest strategy the planner finds for `model` on `cluster`\n"
        "with `profile`, global_batch sequences of seq_len tokens per step, and its predicted step time and\n"
        "memory per rank. zero1=False is --no-zero1; ranks= and previous= re-plan (--ranks, --previous).");

  nb::class_<SenderBytes>(m, "SwitchSender", "What one rank sends in a switch.")
      .def_ro("rank", &SenderBytes::rank)
      .def_ro("device", &SenderBytes::device, "Its device kind in the cluster.")
      .def_ro("bytes_by_tier", &SenderBytes::bytes_by_tier, "{\"intra-node\": bytes, \"inter-node\": bytes}.")
      .def_ro("bytes", &SenderBytes::bytes, "All it sends.");
  nb::class_<PairBytes>(m, "SwitchPair", "What one sender sends one receiver in a switch.")
      .def_ro("sender", &PairBytes::sender)
      .def_ro("receiver", &PairBytes::receiver)
      .def_ro("bytes", &PairBytes::bytes)
      .def_ro("messages", &PairBytes::messages)
      .def_ro("tier", &PairBytes::tier, "The link tier between them.");
  nb::class_<SwitchExplanation>(m, "SwitchExplanation", "The fused BSR of a switch: the result of hspmd.explain_switch.")
      .def_ro("source", &SwitchExplanation::source, "The strategy switched from.")
      .def_ro("target", &SwitchExplanation::target, "The strategy switched to.")
      .def_ro("states", &SwitchExplanation::states,
              "\"params\" or \"params+adam\"; for a move of states=\"bf16-params\": \"bf16 params\" or "
              "\"float32 grads\".")
      .def_ro("algorithm", &SwitchExplanation::algorithm, "fused, per-tensor or per-tensor-lowest-owner.")
      .def_ro("tensors", &SwitchExplanation::tensors, "Tensors moved (float32 unless \"bf16 params\").")
      .def_ro("table_entries", &SwitchExplanation::table_entries)
      .def_ro("messages", &SwitchExplanation::messages)
      .def_ro("sent_bytes", &SwitchExplanation::sent_bytes, "Bytes on the wire, all senders.")
      .def_ro("local_copy_bytes", &SwitchExplanation::local_copy_bytes, "Slices receivers already held.")
      .def_ro("busiest_sender_bytes", &SwitchExplanation::busiest_sender_bytes)
      .def_ro("sent_by_tier", &SwitchExplanation::sent_by_tier, "Bytes per link tier.")
      .def_ro("senders", &SwitchExplanation::senders, "Per sending rank, ascending.")
      .def_ro("pairs", &SwitchExplanation::pairs, "Per (sender, receiver), ascending.");
  nb::class_<Bf16SwitchExplanation>(m, "Bf16SwitchExplanation",
                                     "The moves of every step of a bf16-only switch: the result of\n"
                                     "hspmd.explain_switch(..., states=\"bf16-params\").")
      .def_ro("source", &Bf16SwitchExplanation::source, "The strategy keeping the master state.")
      .def_ro("target", &Bf16SwitchExplanation::target, "The strategy the steps run under.")
      .def_ro("states", &Bf16SwitchExplanation::states, "\"bf16-params\".")
      .def_ro("params_out", &Bf16SwitchExplanation::params_out, "Each step's bf16 parameters, a -> b.")
      .def_ro("grads_back", &Bf16SwitchExplanation::grads_back, "Each step's float32 gradients, b -> a.")
      .def_ro("step_bytes", &Bf16SwitchExplanation::step_bytes, "Bytes on the wire per step, both moves.")
      .def_ro("full", &Bf16SwitchExplanation::full, "The full switch instead: weights and Adam moments, once.");
  m.def("explain_switch", &explain_switch, "a"_a, "b"_a, "model"_a, "cluster"_a, "states"_a = "params",
        "algorithm"_a = "fused", "dead"_a = std::vector<int>{},
        "`hspmd explain --switch A B` as a result object: the fused BSR moving every parameter (states=\n"
        "\"params+adam\": and its AdamW moments) from strategy a's layout to b's on `cluster`, per sender\n"
        "and link tier, per (sender, receiver) pair. algorithm: fused, per-tensor or per-tensor-lowest-owner;\n"
        "dead: ranks that cannot send. states=\"bf16-params\" (a bf16-only switch: a keeps the float32 state)\n"
        "returns a Bf16SwitchExplanation: each step's two moves and the full switch beside them.");
}

}  // namespace hspmd::python
