// Single-process training of any model (models/model.h): the one-rank case of the distributed trainer
// (runtime/dist_trainer.h), so one executor, one optimizer with its clipping and schedule, and one
// parameter init serve both, and every distributed strategy is checked against this run.
//
//   TokenDataset ds = TokenDataset::open("runs/kjv");
//   Trainer t(models::load_model("configs/llama-tiny.json"), ds,
//             {.steps = 200, .seq_len = 256, .global_batch_tokens = 4096, .lr = 3e-3});
//   while (!t.done()) {
//     StepMetrics m = t.step();        // m.loss, m.lr, m.grad_norm, m.tokens_per_second, ...
//   }
//   t.save("runs/ckpt");             // readable by eval and by a resume under any strategy
//
// One step: the Loader yields the global batch (whole segments, <= global_batch_tokens tokens),
// pack() lays it out in rows of seq_len (documents never attend across each other) as one
// micro-batch, forward + backward run with loss_scale = 1 / (labelled tokens of the global batch),
// so the reported loss is the token-weighted mean over the global batch, and AdamW (with
// global-norm clipping and linear warm-up + cosine decay) updates the float32 weights.
// The plan is single_rank_strategy(): every layer on rank 0; the rank's "communicators" are groups
// of one (comm/self_communicator.h), so nothing goes through a transport.
//
// Determinism: parameters are a function of (seed, name, index) (graph/init.h), the data order of
// (seed, epoch) and the kernels are deterministic for a thread count, so a run restored from a
// checkpoint (restore()) produces the same losses, bit for bit, as the uninterrupted run.
#pragma once

#include <cstdint>
#include <memory>

#include "hspmd/comm/group_cache.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/models/model.h"
#include "hspmd/runtime/checkpoint.h"
#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/runtime/train_options.h"
#include "hspmd/sharding/strategy.h"

namespace hspmd::runtime {

class Trainer {
 public:
  // The dataset must outlive the trainer. Errors: invalid options, a dataset whose vocabulary
  // does not fit the model (naming both sizes), seq_len beyond max_position_embeddings.
  Trainer(std::shared_ptr<const models::Model> model, const data::TokenDataset& dataset, TrainerOptions options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Replaces the freshly initialized weights (e.g. Hugging Face weights); optimizer state stays fresh.
  void load_weights(const graph::TensorMap& weights) { trainer_->load_weights(weights); }
  // Continues a checkpointed run: weights, optimizer moments, step and data position. The options
  // that decide the data stream (seq_len, global_batch_tokens, seed) and the model config must equal
  // the checkpoint's. From a checkpoint directory of any strategy, or one in memory.
  void restore(const std::string& dir) { trainer_->restore(dir); }
  void restore(const Checkpoint& checkpoint) { trainer_->restore(checkpoint); }
  // Writes a checkpoint directory in the one format every run reads (runtime/sharded_checkpoint.h).
  void save(const std::string& dir) { trainer_->save(dir); }

  StepMetrics step() { return trainer_->step(); }
  // Mean token loss on `dataset` (e.g. the validation split), forward only (DistTrainer::evaluate).
  double evaluate(const data::TokenDataset& dataset, int64_t max_tokens) {
    return trainer_->evaluate(dataset, max_tokens);
  }
  bool done() const { return trainer_->done(); }
  int64_t step_count() const { return trainer_->step_count(); }

  Checkpoint checkpoint() const;
  // The whole weights by Hugging Face name (on the host: sharing storage with the trainer, so a
  // copy is a snapshot only after clone(); on a GPU run, host copies).
  graph::TensorMap parameters() const;
  const TrainerOptions& options() const { return options_; }
  const models::Model& model() const { return trainer_->model(); }
  // The model's training graph as this trainer built it.
  const models::ModelGraph& model_graph() const { return trainer_->model_graph(); }
  // The one-rank distributed trainer this class wraps (the training loop drives it).
  DistTrainer& distributed() { return *trainer_; }

 private:
  TrainerOptions options_;
  std::unique_ptr<comm::GroupCache> groups_;
  std::unique_ptr<DistTrainer> trainer_;
};

// The strategy of a one-rank run: one pipeline of one stage on rank 0 holding every layer, the
// global batch as one micro-batch.
sharding::Strategy single_rank_strategy(const models::Model& model, const TrainerOptions& options);

}  // namespace hspmd::runtime
