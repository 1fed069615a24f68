// AnnotationPlan: the annotations a user (or a strategy compiler, or a planner) fixes by tensor
// name — parameters, placeholders and named Reshards; everything else is deduced (§6.1).
//
// JSON schema (version 1); annotation values use the canonical text form of Annotation:
//   {
//     "format": "hspmd-plan", "version": 1,
//     "tensors": {                                   // required: name -> annotation
//       "model.layers.0.self_attn.q_proj.weight": "dup{[0-1](S0:2;zero);[2-3](S0:2;zero)}",
//       "input_ids": "split0{[0-1](D:2);[2-3](D:2)}"
//     },
//     "optimizer_states": {                          // optional: ZeRO-sharded optimizer states
//       "model.layers.0.self_attn.q_proj.weight": "split1{[0-1](S0:2);[2-3](S0:2)}"
//     },
//     "pipelines": [                                 // optional: per top-tier data group
//       {"micro_batch_size": 2, "num_micro_batches": 4}, {"micro_batch_size": 1, "num_micro_batches": 8}
//     ],                                             // (each may add "token_order_degree" and
//                                                    //  "sequence_parallel_multiple", default 1)
//     "recompute": false,                            // optional, default false
//     "shard_gradients": true,                       // optional, default false (ZeRO-2, below)
//     "shard_parameters": true                       // optional, default false (ZeRO-3, below)
//   }
// shard_gradients (ZeRO-2): each group of micro-batches' gradients is reduced into the optimizer
// -state layout as soon as its backward pass is done, so no whole gradient is kept from one group to
// the next (runtime/gradient_sync.h). shard_parameters (ZeRO-3, needs shard_gradients): the master
// weights are kept in the optimizer-state layout too, and gathered into the tensor's annotation per
// layer by the passes that read them (runtime/parameter_gathers.h). Each is written only when true.
// Every load error names the source and the key at fault, e.g.
//   "plan.json: tensors.\"lm_head.weight\": cannot parse annotation 'dup{[0-3' ..."
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hspmd/sharding/annotation.h"

namespace hspmd::sharding {

struct PipelineSchedule {
  int micro_batch_size = 1;   // sequences per micro-batch
  int num_micro_batches = 1;  // micro-batches per step
  // Context parallelism: the degree of the zigzag order (data/context_parallel.h) the pipeline's
  // tokens are fed in, a multiple of every stage's CP degree (each stage splits the order evenly).
  int token_order_degree = 1;
  // Sequence parallelism: the least common multiple of the SP stages' TP x CP (of every pipeline:
  // sharding::Strategy::sequence_parallel_multiple), which each fed row is padded to a multiple of
  // so that every SP stage splits any micro-batch's tokens evenly.
  int sequence_parallel_multiple = 1;
  // What each fed row is padded to a multiple of: 2 x token_order_degree under CP (the zigzag
  // chunks) and sequence_parallel_multiple; 1 without either.
  int64_t row_multiple() const;
  // Tokens a fed row of seq_len takes once padded to a multiple of row_multiple().
  int64_t row_tokens(int64_t seq_len) const;
  friend bool operator==(const PipelineSchedule&, const PipelineSchedule&) = default;
};

class AnnotationPlan {
 public:
  void set(const std::string& name, Annotation annotation);
  void set_optimizer_state(const std::string& name, Annotation annotation);
  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }
  // Throws Error naming the tensor when it is not in the plan.
  const Annotation& at(const std::string& name) const;
  // The optimizer-state annotation; the tensor's own annotation when none is set.
  const Annotation& optimizer_state(const std::string& name) const;
  const std::map<std::string, Annotation>& tensors() const { return tensors_; }
  const std::map<std::string, Annotation>& optimizer_states() const { return optimizer_states_; }

  std::vector<PipelineSchedule> pipelines;
  bool recompute = false;
  bool shard_gradients = false;
  // ZeRO-3: each holder keeps only its optimizer-state shard of the parameter's value; the passes
  // all-gather it into the parameter's annotation per layer (runtime/parameter_gathers.h).
  bool shard_parameters = false;

  std::string to_json_text() const;
  // `source` names the file in error messages.
  static AnnotationPlan from_json_text(const std::string& text, const std::string& source);
  static AnnotationPlan from_file(const std::string& path);
  void save(const std::string& path) const;

  friend bool operator==(const AnnotationPlan&, const AnnotationPlan&) = default;

 private:
  std::map<std::string, Annotation> tensors_;
  std::map<std::string, Annotation> optimizer_states_;
};

}  // namespace hspmd::sharding
