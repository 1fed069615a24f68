// Strategy: a short description of a (possibly heterogeneous) parallel strategy in the shape of
// the paper's Tables 9-16: pipelines -> stages -> {ranks, layers}. The TP degree of a stage is its
// number of ranks unless the stage gives a context-parallel degree (below); pipelines are data-parallel replicas of the model (gradients are synchronized
// across them), each with its own micro-batch size and count.
//
// JSON schema (e.g. Table 9, "32B, 16 H800, 16 H20", first pipeline):
//   {
//     "name": "table9-32b-16h800-16h20",
//     "zero": 1,                      // optional, default 0: the ZeRO stage across pipelines (below)
//     "recompute": false,             // optional, default false: activation recomputation
//     "pipelines": [
//       {"micro_batch_size": 1, "num_micro_batches": 32,
//        "stages": [{"ranks": "16-19", "layers": "0-6"},  {"ranks": "20-23", "layers": "7-13"},
//                   {"ranks": "0-3",   "layers": "14-36"}, {"ranks": "4-7",  "layers": "37-59"}]},
//       ...
//     ]
//   }
// ZeRO ("zero": 0, 1, 2 or 3; the older "zero1": true reads as 1, false as 0, and a file giving both
// must agree): 1 shards the AdamW moments over the replicas of each parameter (its data-parallel
// and CP duplicates) and reduce-scatters the summed gradients into those shards after the
// backward pass; 2 also keeps no whole gradient across micro-batches: each group of micro-batches'
// gradients is reduce-scattered into the shard as soon as its backward is done
// (sharding::AnnotationPlan::shard_gradients); 3 also keeps each replica's master weights as its
// shard only, all-gathered layer by layer where the passes read them
// (sharding::AnnotationPlan::shard_parameters). Stage 3 needs pipelines of one micro-batch count
// (validate()); their stages, layers and TP and CP degrees may differ.
//
// "ranks" is a string of ids and ascending ranges ("0-3,8") or an array of ints; "layers" is
// "a-b" (inclusive) or a single layer "a". The embedding lives on each pipeline's first stage, the
// final norm and LM head on its last stage.
//
// Context parallelism (docs/context-parallelism.md): a stage may give "tp": T and "cp": C with T x C
// ranks ("cp" alone: T = ranks / C). Its rank i has CP coordinate i / T and TP coordinate i % T, so
// ranks "0-3" with tp 2, cp 2 form the TP groups {0,1}, {2,3} and the CP groups {0,2}, {1,3}: each
// CP rank holds 1/C of every sequence's tokens (zigzag chunks), each TP group splits the heads.
// Stages of one pipeline may have different cp: the pipeline feeds its tokens in the zigzag order
// of the least common multiple of its stages' cp, each stage splits that order evenly over its own
// CP ranks, and the activation crossing a boundary between two degrees is an ordinary Reshard.
//
// Sequence parallelism: a stage may give "sequence_parallel": true. The activations between its TP
// blocks (the residual stream, the norms before attention and MLP, the residual adds) are then split
// along the tokens inside each TP group as well (with CP: over all T x C ranks, each CP rank's tokens
// cut in T), so that work runs on 1/T of the tokens; resolution turns the TP all-reduces after the
// row-parallel matmuls into reduce-scatters and adds an all-gather before the column-parallel ones.
//
// Every object may also carry a "comment". Any other key is refused, naming it, where it is and
// the nearest known key ("s.json: pipelines[0].stages[1]: unknown key "tpp" (did you mean "tp"?)
// ..."), because an ignored misspelling would train another strategy than the one written.
//
// Loading checks the structure (a rank in two places, malformed ranges, stages out of layer
// order); validate(num_layers) checks that every pipeline covers each layer exactly once. Errors
// name the key at fault: "s.json: pipelines[1].stages[2].layers: layer 40 is also in stages[1]".
#pragma once

#include <string>
#include <vector>

namespace hspmd::sharding {

struct StageSpec {
  std::vector<int> ranks;  // the stage's ranks, CP coordinate outer, TP coordinate inner
  int first_layer = 0;     // inclusive
  int last_layer = 0;      // inclusive
  int cp = 1;              // context-parallel degree (divides the rank count)
  bool sequence_parallel = false;  // activations between TP blocks split by tokens over TP (below)
  int tp() const { return static_cast<int>(ranks.size()) / cp; }
  bool has_layer(int l) const { return first_layer <= l && l <= last_layer; }
  friend bool operator==(const StageSpec&, const StageSpec&) = default;
};

struct PipelineSpec {
  int micro_batch_size = 1;
  int num_micro_batches = 1;
  std::vector<StageSpec> stages;  // in pipeline order
  // The degree of the zigzag order its tokens are fed in: the least common multiple of its stages'
  // cp (each stage splits that order evenly over its CP ranks).
  int token_order_degree() const;
  // The greatest common divisor of its stages' cp: the split of the fed order every stage refines.
  int common_cp() const;
  friend bool operator==(const PipelineSpec&, const PipelineSpec&) = default;
};

struct Strategy {
  std::string name;
  int zero = 0;  // ZeRO stage: 0 to 3 (see above)
  bool recompute = false;
  std::vector<PipelineSpec> pipelines;

  // ZeRO-1 and above: the optimizer states are sharded over each parameter's replicas.
  bool shards_optimizer_states() const { return zero >= 1; }
  // ZeRO-2: gradients are reduce-scattered into those shards micro-batch group by group.
  bool shards_gradients() const { return zero >= 2; }
  // ZeRO-3: the parameters too, gathered per layer before use.
  bool shards_parameters() const { return zero >= 3; }

  // The least common multiple of every SP stage's tp x cp (1 without SP): each pipeline pads its fed
  // rows to a multiple of it, so that each SP stage splits any micro-batch's tokens evenly. Pipelines
  // without SP pad too: an activation's annotation spans the pipelines, and each rank checks all of
  // it against its own micro-batch's tokens.
  int sequence_parallel_multiple() const;
  // Every rank used, ascending.
  std::vector<int> ranks() const;
  // Index of the stage of pipeline p that holds layer l (validate() guarantees exactly one).
  int stage_of_layer(int p, int l) const;
  // Throws Error naming the pipeline/stage at fault unless every pipeline covers layers
  // 0..num_layers-1 exactly once, and, under ZeRO-3, unless all pipelines run as many micro-batches.
  void validate(int num_layers) const;

  std::string to_json_text() const;
  static Strategy from_json_text(const std::string& text, const std::string& source);
  static Strategy from_file(const std::string& path);

  friend bool operator==(const Strategy&, const Strategy&) = default;

 private:
  void check_equal_micro_batch_counts() const;  // ZeRO-3's condition, naming the first pipeline at fault
};

}  // namespace hspmd::sharding
