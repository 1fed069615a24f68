// hspmd.explain(model, strategy, ...): the structured form of `hspmd explain --strategy`. It calls
// what the CLI calls (specialize::make_plan_report, and with a cluster and a profile the cost model's
// planner::CostModel::predict) and exposes those results as they are: per pipeline and stage the
// ranks, layers, degrees and schedule; per Reshard its classification and bytes; bytes per link
// tier; the predicted step time and memory per rank. str() of the result is the CLI's text.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "hspmd/core/error.h"
#include "hspmd/models/model.h"
#include "hspmd/planner/cost_model.h"
#include "hspmd/planner/profile.h"
#include "hspmd/resolve/topology.h"
#include "hspmd/sharding/strategy.h"
#include "hspmd/specialize/plan_report.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace hspmd::python {

namespace {

using specialize::DeviceOps;
using specialize::PipelineReport;
using specialize::PlanReport;
using specialize::ReshardGroup;
using specialize::StageReport;

// One rank's part in the plan: the stage it belongs to, and with a profile the cost model's figures.
struct RankExplanation {
  int rank = 0;
  int pipeline = 0, stage = 0;
  std::string layers;
  int tp = 1, cp = 1;
  int micro_batch_size = 1, num_micro_batches = 1;
  std::string schedule;                          // "F0 B0 F1 B1"
  std::optional<planner::RankPrediction> prediction;  // with cluster and profile
};

struct Explanation {
  PlanReport report;
  int num_ops = 0;  // of the graph with backward
  std::optional<planner::Prediction> prediction;
  std::vector<RankExplanation> ranks;  // ascending
  std::string text;                    // what `hspmd explain --strategy` prints after its first line
};

std::vector<RankExplanation> rank_view(const PlanReport& report, const std::optional<planner::Prediction>& p) {
  std::map<int, RankExplanation> by_rank;
  for (size_t pi = 0; pi < report.pipelines.size(); ++pi) {
    const PipelineReport& pipeline = report.pipelines[pi];
    for (size_t si = 0; si < pipeline.stages.size(); ++si) {
      const StageReport& stage = pipeline.stages[si];
      for (int r : stage.ranks) {
        by_rank[r] = {r, static_cast<int>(pi), static_cast<int>(si), stage.layers,
                      static_cast<int>(stage.ranks.size()) / stage.cp, stage.cp, pipeline.micro_batch_size,
                      pipeline.num_micro_batches, specialize::to_string(stage.schedule), std::nullopt};
      }
    }
  }
  if (p) {
    for (const planner::RankPrediction& rp : p->ranks) {
      if (by_rank.count(rp.rank)) by_rank[rp.rank].prediction = rp;
    }
  }
  std::vector<RankExplanation> out;
  for (auto& [r, e] : by_rank) out.push_back(std::move(e));
  return out;
}

Explanation explain(const models::Model& model, const sharding::Strategy& strategy, int64_t seq_len,
                    const std::string& schedule, const resolve::Topology* cluster, const planner::Profile* profile) {
  HSPMD_CHECK(profile == nullptr || cluster != nullptr)
      << "explain --profile needs --cluster C.json (device kinds, memory, links)";
  const specialize::ScheduleKind kind = specialize::parse_schedule_kind(schedule);
  const models::ModelGraph graph = model.build({});
  Explanation e;
  e.report = specialize::make_plan_report(graph, model.compile_plan(strategy), {kind, seq_len, cluster});
  e.num_ops = static_cast<int>(graph.graph.num_ops());
  e.text = specialize::to_string(e.report);
  if (profile != nullptr) {
    e.prediction = planner::CostModel(model, *cluster, *profile, {seq_len, kind}).predict(strategy);
    e.text += planner::to_string(*e.prediction);
  }
  e.ranks = rank_view(e.report, e.prediction);
  return e;
}

void bind_plan_report(nb::module_& m) {
  nb::class_<StageReport>(m, "StageReport", "One stage of a pipeline as the plan runs it.")
      .def_ro("ranks", &StageReport::ranks, "Its ranks, ascending.")
      .def_ro("layers", &StageReport::layers, "Decoder layers computed here: \"0-6\", \"\" when none.")
      .def_ro("cp", &StageReport::cp, "Context-parallel degree.")
      .def_prop_ro(
          "tp", [](const StageReport& s) { return static_cast<int>(s.ranks.size()) / s.cp; }, "Tensor-parallel degree.")
      .def_prop_ro(
          "schedule", [](const StageReport& s) { return specialize::to_string(s.schedule); },
          "One step's tasks in order: \"F0 B0 F1 B1\" (forward/backward of micro-batch i).");
  nb::class_<PipelineReport>(m, "PipelineReport", "One pipeline of the plan.")
      .def_ro("micro_batch_size", &PipelineReport::micro_batch_size, "Sequences per micro-batch.")
      .def_ro("num_micro_batches", &PipelineReport::num_micro_batches, "Micro-batches per step.")
      .def_ro("binding", &PipelineReport::binding, "Symbol values of its activations: {\"T\": tokens, \"N\": documents}.")
      .def_ro("stages", &PipelineReport::stages, "Stages in pipeline order.");
  nb::class_<DeviceOps>(m, "DeviceOps", "One device's part in a resolved Reshard.")
      .def_ro("device", &DeviceOps::device, "The device (rank).")
      .def_ro("bytes", &DeviceOps::bytes, "Bytes it sends per occurrence.")
      .def_prop_ro(
          "ops",
          [](const DeviceOps& d) {
            std::vector<std::string> ops;
            for (const resolve::CommOp& op : d.ops) ops.push_back(op.to_string());
            return ops;
          },
          "Its communication ops as the CLI prints them (\"AllReduce group=[0-1] ... bytes=65536\").");
  nb::class_<ReshardGroup>(m, "Reshard", "Reshards that differ only in their decoder layer, resolved once.")
      .def_prop_ro("name", &ReshardGroup::display_name, "\"model.layers.{0..3}.attn_out\", or the plain name.")
      .def_ro("pattern", &ReshardGroup::pattern, "\"model.layers.{L}.attn_out\", or the plain name.")
      .def_ro("layers", &ReshardGroup::layers, "The decoder layer of each occurrence; empty for a plain name.")
      .def_ro("occurrences", &ReshardGroup::occurrences, "How many Reshards the group stands for.")
      .def_ro("src", &ReshardGroup::src, "Source annotation, canonical text.")
      .def_ro("dst", &ReshardGroup::dst, "Destination annotation, canonical text.")
      .def_ro("shape", &ReshardGroup::shape, "The tensor's shape: \"[T, 128]\" (symbolic) or \"[64, 128]\".")
      .def_ro("kind", &ReshardGroup::classification, "Its classification: \"bottom[AR,SR]\", \"BSR\", ...")
      .def_ro("devices", &ReshardGroup::devices, "Each device's ops and bytes, ascending device.")
      .def_ro("bytes", &ReshardGroup::bytes, "Bytes of one occurrence, all devices.")
      .def_ro("occurrence_step_bytes", &ReshardGroup::occurrence_step_bytes,
              "Bytes one occurrence puts on each link tier per step (runs per step counted).")
      .def_prop_ro("step_bytes", &ReshardGroup::step_bytes, "Bytes per step: all occurrences, all tiers.")
      .def_prop_ro("local_only", &ReshardGroup::local_only, "Whether it sends nothing (local copies only).");
}

void bind_prediction(nb::module_& m) {
  nb::class_<planner::MemoryBreakdown>(m, "MemoryBreakdown", "A rank's predicted memory, in bytes.")
      .def_ro("parameters", &planner::MemoryBreakdown::parameters, "Weights and gradient buffers of its shard.")
      .def_ro("zero_states", &planner::MemoryBreakdown::zero_states, "Optimizer states and synced gradients.")
      .def_ro("activations", &planner::MemoryBreakdown::activations, "Activations kept for the backward pass.")
      .def_ro("reserved", &planner::MemoryBreakdown::reserved, "Reserved by the runtime.")
      .def_prop_ro("total", &planner::MemoryBreakdown::total, "All of it.");
  nb::class_<planner::RankPrediction>(m, "RankPrediction", "The cost model's figures for one rank.")
      .def_ro("rank", &planner::RankPrediction::rank)
      .def_ro("pipeline", &planner::RankPrediction::pipeline)
      .def_ro("stage", &planner::RankPrediction::stage)
      .def_ro("kind", &planner::RankPrediction::kind, "Its device kind.")
      .def_ro("memory", &planner::RankPrediction::memory, "Predicted memory.")
      .def_ro("capacity", &planner::RankPrediction::capacity, "The device's memory from the cluster spec.");
  nb::class_<planner::StagePrediction>(m, "StagePrediction", "The cost model's times for one stage, in seconds.")
      .def_ro("kind", &planner::StagePrediction::kind, "The slowest device kind of the stage.")
      .def_ro("tp", &planner::StagePrediction::tp)
      .def_ro("cp", &planner::StagePrediction::cp)
      .def_ro("layers", &planner::StagePrediction::layers, "How many decoder layers.")
      .def_ro("compute_seconds", &planner::StagePrediction::compute_seconds, "Per micro-batch.")
      .def_ro("tp_comm_seconds", &planner::StagePrediction::tp_comm_seconds, "Per micro-batch.")
      .def_ro("cp_comm_seconds", &planner::StagePrediction::cp_comm_seconds, "Per micro-batch.")
      .def_ro("p2p_seconds", &planner::StagePrediction::p2p_seconds, "Per micro-batch, to the next stage.")
      .def_ro("sync_seconds", &planner::StagePrediction::sync_seconds, "Gradient sync, per step.")
      .def_ro("optimizer_seconds", &planner::StagePrediction::optimizer_seconds, "Per step.");
  nb::class_<planner::PipelinePrediction>(m, "PipelinePrediction", "The cost model's times for one pipeline.")
      .def_ro("stages", &planner::PipelinePrediction::stages)
      .def_ro("pipeline_seconds", &planner::PipelinePrediction::pipeline_seconds,
              "Forward and backward of all micro-batches, with the bubble.")
      .def_ro("end_seconds", &planner::PipelinePrediction::end_seconds, "Plus the slowest stage's sync and optimizer.");
  nb::class_<planner::Prediction>(m, "Prediction", "The cost model's prediction for a strategy.")
      .def_ro("step_seconds", &planner::Prediction::step_seconds, "Predicted step time.")
      .def_ro("pipelines", &planner::Prediction::pipelines)
      .def_ro("ranks", &planner::Prediction::ranks, "Per rank, ascending.")
      .def_ro("fits", &planner::Prediction::fits, "Whether every rank's memory fits its device.")
      .def_ro("overflows", &planner::Prediction::overflows, "One line per rank that does not fit.");
}

void bind_explanation(nb::module_& m) {
  nb::class_<RankExplanation>(m, "RankExplanation", "One rank's part in the plan.")
      .def_ro("rank", &RankExplanation::rank)
      .def_ro("pipeline", &RankExplanation::pipeline, "Index of its pipeline.")
      .def_ro("stage", &RankExplanation::stage, "Index of its stage in the pipeline.")
      .def_ro("layers", &RankExplanation::layers, "Decoder layers it computes: \"0-6\", \"\" when none.")
      .def_ro("tp", &RankExplanation::tp)
      .def_ro("cp", &RankExplanation::cp)
      .def_ro("micro_batch_size", &RankExplanation::micro_batch_size)
      .def_ro("num_micro_batches", &RankExplanation::num_micro_batches)
      .def_ro("schedule", &RankExplanation::schedule, "One step's tasks: \"F0 B0 F1 B1\".")
      .def_ro("prediction", &RankExplanation::prediction, "The cost model's figures (with cluster and profile).");
  nb::class_<Explanation>(m, "Explanation", "What a strategy does: the result of hspmd.explain.")
      .def_prop_ro("pipelines", [](const Explanation& e) { return e.report.pipelines; }, "In subgroup order.")
      .def_prop_ro("ranks", [](const Explanation& e) { return e.ranks; }, "Per rank, ascending.")
      .def_prop_ro("activations", [](const Explanation& e) { return e.report.activations; },
                   "Forward then backward Reshards that are not the identity everywhere, in graph order.")
      .def_prop_ro("gradient_syncs", [](const Explanation& e) { return e.report.gradient_syncs; },
                   "Gradient -> optimizer-state Reshards.")
      .def_prop_ro("parameter_gathers", [](const Explanation& e) { return e.report.parameter_gathers; },
                   "ZeRO-1 optimizer-state -> parameter Reshards.")
      .def_prop_ro("step_bytes_by_tier", [](const Explanation& e) { return e.report.step_bytes_by_tier; },
                   "Bytes one step puts on each link tier (\"all\" without a cluster).")
      .def_prop_ro("reshards_total", [](const Explanation& e) { return e.report.reshards_total; },
                   "Reshard ops in the graph.")
      .def_prop_ro("reshards_identity", [](const Explanation& e) { return e.report.reshards_identity; },
                   "Of them, the identity everywhere (not listed).")
      .def_prop_ro("seq_len", [](const Explanation& e) { return e.report.seq_len; })
      .def_prop_ro(
          "schedule", [](const Explanation& e) { return std::string(specialize::schedule_kind_name(e.report.schedule)); },
          "\"1f1b\" or \"gpipe\".")
      .def_prop_ro("cluster", [](const Explanation& e) { return e.report.topology; }, "The cluster's name, or \"\".")
      .def_ro("num_ops", &Explanation::num_ops, "Ops of the graph with backward.")
      .def_ro("prediction", &Explanation::prediction, "The cost model's prediction (with cluster and profile).")
      .def("__str__", [](const Explanation& e) { return e.text; });
}

}  // namespace

void bind_explain(nb::module_& m) {
  bind_plan_report(m);
  bind_prediction(m);
  bind_explanation(m);
  m.def(
      "explain",
      [](const models::Model& model, const sharding::Strategy& strategy, int64_t seq_len, const std::string& schedule,
         const resolve::Topology* cluster, const planner::Profile* profile) {
        return explain(model, strategy, seq_len, schedule, cluster, profile);
      },
      "model"_a, "strategy"_a, "seq_len"_a = 4096, "schedule"_a = "1f1b", "cluster"_a = nb::none(),
      "profile"_a = nb::none(),
      "What a strategy does on a model, as `hspmd explain --strategy` computes it: the pipelines and\n"
      "each stage's schedule, every Reshard resolved per device with its bytes, the bytes per link\n"
      "tier of `cluster`, and with `cluster` and `profile` the predicted step time and memory per rank.\n"
      "str() of the result is the CLI's text.");
}

}  // namespace hspmd::python
