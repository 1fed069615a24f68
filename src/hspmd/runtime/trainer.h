// Single-process training of the built-in Llama: the oracle every distributed strategy is checked
// against (DESIGN.md §9).
//
//   TokenDataset ds = TokenDataset::open("runs/kjv");
//   Trainer t(LlamaConfig::from_file("configs/llama-tiny.json"), ds,
//             {.steps = 200, .seq_len = 256, .global_batch_tokens = 4096, .lr = 3e-3});
//   while (!t.done()) {
//     StepMetrics m = t.step();        // m.loss, m.lr, m.grad_norm, m.tokens_per_second, ...
//   }
//   save_checkpoint("runs/ckpt", t.checkpoint());
//
// One step: the Loader yields the global batch (whole segments, <= global_batch_tokens tokens),
// pack() lays it out in rows of seq_len (documents never attend across each other), the Executor
// runs forward + backward with loss_scale = 1 / (labelled tokens of the global batch), so the
// reported loss is the token-weighted mean over the global batch, and AdamW (with global-norm
// clipping and linear warm-up + cosine decay) updates the float32 weights.
//
// Determinism: parameters are a function of (seed, name, index) (graph/init.h), the data order of
// (seed, epoch) and the kernels are deterministic for a thread count, so a run restored from a
// checkpoint (restore()) produces the same losses, bit for bit, as the uninterrupted run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <nlohmann/json.hpp>

#include "hspmd/data/loader.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/graph/executor.h"
#include "hspmd/graph/optimizer.h"
#include "hspmd/models/llama.h"
#include "hspmd/runtime/checkpoint.h"

namespace hspmd::runtime {

struct TrainerOptions {
  int64_t steps = 100;                 // optimizer steps of the whole run (resumed steps included)
  int64_t seq_len = 256;               // context length: longest segment and packed row
  int64_t global_batch_tokens = 4096;  // token budget of one step (>= seq_len)
  double lr = 3e-3;                    // peak learning rate
  int64_t warmup = 10;                 // linear warm-up steps
  double min_lr = 3e-4;                // reached at the end of the cosine decay
  int64_t decay_steps = 0;             // length of the schedule; 0 = steps (set it to stop a run early
                                       // and resume it later on the same schedule)
  double weight_decay = 0.1;           // decoupled, matrices only
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double max_grad_norm = 1.0;          // global-norm clipping; 0 = none
  uint64_t seed = 1;                   // parameter init and data order
  bool recompute = false;              // per-layer activation recomputation
  int threads = 0;                     // kernel threads; 0 = leave the process setting alone

  nlohmann::json to_json() const;
  // Fields absent from j keep their value in `defaults`; Error naming a field of the wrong type.
  static TrainerOptions from_json(const nlohmann::json& j, const TrainerOptions& defaults);
  static TrainerOptions from_json(const nlohmann::json& j);  // defaults: TrainerOptions{}
};

struct StepMetrics {
  int64_t step = 0;           // 1-based optimizer step just taken
  double loss = 0.0;          // token-weighted mean cross-entropy over the global batch
  double lr = 0.0;
  double grad_norm = 0.0;     // before clipping
  int64_t tokens = 0;         // tokens in the global batch
  int64_t label_tokens = 0;   // tokens that carry a label (the loss denominator)
  double step_seconds = 0.0;  // wall time of the whole step (data, forward, backward, optimizer)
  double tokens_per_second = 0.0;
  size_t peak_bytes = 0;      // executor's allocator high-water mark in this step

  nlohmann::json to_json() const;  // one metrics JSONL line
};

class Trainer {
 public:
  // The dataset must outlive the trainer. Errors: invalid options, a dataset whose vocabulary
  // does not fit the model (naming both sizes), seq_len beyond max_position_embeddings.
  Trainer(const models::LlamaConfig& config, const data::TokenDataset& dataset, TrainerOptions options);
  ~Trainer();
  // The executor refers to the graph inside: a trainer stays where it was built.
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Replaces the freshly initialized weights (e.g. Hugging Face weights); optimizer state stays fresh.
  void load_weights(const graph::TensorMap& weights);
  // Continues a checkpointed run: weights, optimizer moments, step and data position. The options
  // that decide the data stream (seq_len, global_batch_tokens, seed) must equal the checkpoint's.
  void restore(const Checkpoint& checkpoint);

  StepMetrics step();
  bool done() const { return step_count() >= options_.steps; }
  int64_t step_count() const { return optimizer_->step_count(); }

  Checkpoint checkpoint() const;
  const graph::TensorMap& parameters() const { return params_; }
  const TrainerOptions& options() const { return options_; }
  const models::LlamaModel& model() const { return model_; }

 private:
  TrainerOptions options_;
  models::LlamaModel model_;
  const data::TokenDataset* dataset_;
  graph::TensorMap params_;
  std::unique_ptr<data::Loader> loader_;
  std::unique_ptr<graph::Executor> executor_;
  std::unique_ptr<graph::AdamW> optimizer_;
};

// Errors naming the option at fault (steps, seq_len beyond the model's context, learning rates ...).
void validate_options(const TrainerOptions& options, const models::LlamaConfig& config);
// AdamW, clipping and the warm-up + cosine schedule of a run (shared with DistTrainer).
graph::OptimizerOptions optimizer_options(const TrainerOptions& options);

// The feeds of the Llama placeholders for one packed batch; loss_scale = 1 / label_tokens.
graph::TensorMap llama_feeds(const data::Batch& batch, int64_t label_tokens);

}  // namespace hspmd::runtime
