// Pipelines found in an annotated graph by the A.2 procedure: devices that share a collective
// (the same sharding subgroup of a forward compute op) merge into one stage; a forward Reshard
// that moves data point to point from one stage's devices to another's chains the second after
// the first. Connected chains are the pipelines; the stage order is the data-flow order.
//
//   Strategy "local-hetero-4": pipeline 0 = stage  {0,1} (TP 2, all layers)
//                              pipeline 1 = stages {2} (layers 0-1) -> {3} (layers 2-3)
//   PipelineLayout p = build_pipeline_layout(g, deduced);
//   p.pipelines.size() == 2;  p.pipelines[1].stages == {{2},{3}};  p.locate(3) == {1, 1}
//
// What counts: forward ops only (Op::backward false), and of the Reshards only those on data
// (ops_on_data: a Reshard of parameters alone belongs to Pre and chains nothing). Leaves (placeholders, parameters, constants)
// never merge devices: a placeholder such as `positions` is fed to every rank of a pipeline
// without implying a collective. A Reshard whose every destination device already holds the
// source (a local copy, e.g. "model.layers.3.positions") adds no edge; one with a destination
// group holding a device outside its source group (e.g. disjoint: a layer hand-over) adds an edge
// source stage -> destination stage, unless both already are one stage. Source and destination
// groups are paired by subgroup index when the hsize is kept, all pairs otherwise.
// A Reshard whose source and destination groups hold the same devices (TP all-reduce) merges like
// a compute op.
// Errors (naming the op): a stage with two successors or two predecessors in one pipeline's
// chain (the strategy is not a set of chains), a cycle.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "hspmd/graph/deduction.h"
#include "hspmd/graph/graph.h"

namespace hspmd::specialize {

struct PipelineStages {
  std::vector<std::vector<int>> stages;  // in data-flow order; each stage's ranks ascending
};

struct PipelineLayout {
  std::vector<PipelineStages> pipelines;  // ordered by their lowest rank

  // (pipeline, stage) of a rank; throws Error naming the rank when no stage holds it.
  std::pair<int, int> locate(int rank) const;
  // "pipeline 0: [0,1] -> [2]\npipeline 1: [3]\n"
  std::string to_string() const;
};

PipelineLayout build_pipeline_layout(const graph::Graph& g, const graph::DeducedAnnotations& deduced);

// Per op id: whether the op depends on a placeholder (runs per micro-batch in F or B). A Reshard
// that does not (e.g. a tied weight moved to the last stage) runs once per step in Pre (A.2).
std::vector<bool> ops_on_data(const graph::Graph& g);

}  // namespace hspmd::specialize
