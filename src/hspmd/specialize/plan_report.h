// What a plan does on a cluster, in the terms a person checks by eye (architecture §4, §6; what
// `hspmd explain --strategy` prints): the pipelines found in the annotated graph and each stage's
// schedule; every Reshard that is not the identity everywhere, resolved per device, with Reshards
// that differ only in their layer summarized once; the gradient syncs and ZeRO-1 parameter
// gathers; each rank's memory estimate; and the bytes one training step puts on each link tier.
//
//   std::shared_ptr<const Model> m = load_model("configs/llama-tiny.json");
//   AnnotationPlan plan = m->compile_plan(Strategy::from_file("local-hetero-4.json"));
//   PlanReport r = make_plan_report(m->build({}), plan, {.seq_len = 64});
//   r.pipelines[1].stages[0].ranks == {2};  r.pipelines[1].stages[0].layers == "0-1"
//   r.activations has "model.layers.{0..1}.attn_out" (2 occurrences; layers 2-3 sit on another
//     stage of pipeline 1, so their src/dst differ: a second group), classification
//     "bottom[AR,Identity]": rank 0 AllReduce group=[0-1] [0:128, 0:128] bytes=65536 (T = 2 * 64),
//     and "model.layers.1.output" "bottom[Identity,SR]": rank 2 Send peer=3 [0:64, 0:128]
//   std::cout << to_string(r);
//
// Symbols: activations are [T, ...] per micro-batch; pipeline p binds T = micro_batch_size_p *
// seq_len (under CP or SP, seq_len padded as the fed rows are: PipelineSchedule::row_tokens)
// and N = micro_batch_size_p
// (documents per micro-batch), one binding per sharding subgroup
// (the plan's pipelines are its subgroups, in order). Bytes are what senders put on the wire
// (resolve/comm_op.h), at the element size of each tensor's dtype.
// Per step: an activation Reshard (forward or backward, on data) runs once per micro-batch of the
// pipeline each device is in; a Reshard of parameters only (a tied weight) runs once per step in
// Pre, as do gradient syncs (Post; under ZeRO-2 once per gradient group, runtime/gradient_sync.h)
// and parameter gathers (Pre).
// Link tiers (resolve/topology.h): a point-to-point op by its two ends; a collective by the
// slowest link inside its group (a ring over nodes crosses nodes). Without a topology, one tier "all".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hspmd/models/model.h"
#include "hspmd/resolve/comm_op.h"
#include "hspmd/resolve/topology.h"
#include "hspmd/sharding/plan.h"
#include "hspmd/specialize/memory_estimate.h"
#include "hspmd/specialize/pipeline_layout.h"
#include "hspmd/specialize/schedule.h"

namespace hspmd::specialize {

struct PlanReportOptions {
  ScheduleKind schedule = ScheduleKind::k1F1B;
  int64_t seq_len = 4096;                       // tokens per sequence
  const resolve::Topology* topology = nullptr;  // nullptr: one link tier "all"
};

struct StageReport {
  std::vector<int> ranks;  // ascending
  std::string layers;      // decoder layers computed here: "0-6", "" when none
  int cp = 1;              // context-parallel degree: how many ways its computed values split the token dim 0
  std::vector<Task> schedule;
};

struct PipelineReport {
  int subgroup = 0;  // index of this pipeline in the plan (and in every activation's dg_union)
  int micro_batch_size = 1;
  int num_micro_batches = 1;
  SymBinding binding;  // {T, N}
  std::vector<StageReport> stages;
};

// One device's part in a resolved Reshard.
struct DeviceOps {
  int device = 0;
  std::vector<resolve::CommOp> ops;  // Identity ops left out
  int64_t bytes = 0;                 // sent per occurrence
};

// Reshards that differ only in the decoder layer they belong to, resolved once.
struct ReshardGroup {
  std::string pattern;             // "model.layers.{L}.attn_out" (or the plain name)
  std::vector<int> layers;         // the L of each occurrence; empty for a plain name
  int occurrences = 1;
  std::string src, dst;            // annotations, canonical text
  std::string shape;               // "[T, 128]" (symbolic) or "[64, 128]"
  std::string classification;      // per subgroup when resolved per pipeline: "bottom[AR,SR]"
  std::vector<DeviceOps> devices;  // ascending device
  int64_t bytes = 0;               // one occurrence, all devices
  // One occurrence per step: bytes times the runs per step of each sender (micro-batches), by tier.
  std::map<std::string, int64_t> occurrence_step_bytes;
  int64_t step_bytes() const;  // all occurrences, all tiers
  bool local_only() const { return bytes == 0; }
  // "model.layers.{0..3}.attn_out" / "model.layers.{0,2}.output" / the plain name.
  std::string display_name() const;
};

struct RankMemory {
  int rank = 0;
  MemoryEstimate estimate;
};

struct PlanReport {
  std::vector<PipelineReport> pipelines;  // in subgroup order
  std::vector<ReshardGroup> activations;  // forward then backward Reshards, in graph order of first occurrence
  std::vector<ReshardGroup> gradient_syncs;    // deduced gradient -> optimizer target
  std::vector<ReshardGroup> parameter_gathers;  // ZeRO optimizer state -> parameter
  std::map<std::string, int64_t> step_bytes_by_tier;  // link tier name -> bytes per step
  std::vector<RankMemory> memory;  // every rank of the pipelines, ascending, at seq_len
  int zero2_gradient_groups = 0;   // ZeRO-2: how many times a step runs each gradient sync; 0: once, in Post
  bool zero3 = false;              // ZeRO-3: parameters gathered per layer in F and B
  int reshards_total = 0;     // Reshard ops of the graph
  int reshards_identity = 0;  // of them, the identity everywhere (not listed)
  ScheduleKind schedule = ScheduleKind::k1F1B;
  int64_t seq_len = 0;
  std::string topology;  // its name, or "" without one
};

// Deduces the graph's annotations, builds the pipeline layout and schedules, resolves every
// Reshard, gradient sync and parameter gather of a model's graph (models::Model::build, with
// backward). Errors name the tensor or op at fault.
PlanReport make_plan_report(const models::ModelGraph& model, const sharding::AnnotationPlan& plan,
                            const PlanReportOptions& options = {});

// The human-readable text of `hspmd explain --strategy`.
std::string to_string(const PlanReport& report);

}  // namespace hspmd::specialize
