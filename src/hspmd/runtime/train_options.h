// The options of a training run and what one step reports, shared by the single-process and the
// distributed trainer (runtime/trainer.h, runtime/dist_trainer.h), with their JSON forms (checkpoint
// state, metrics lines) and the optimizer they derive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

#include "hspmd/data/packing.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/graph/graph.h"
#include "hspmd/graph/optimizer.h"
#include "hspmd/models/model.h"
#include "hspmd/runtime/bf16_switch_traffic.h"

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
  // Compute precision of matmuls and attention: kFloat32, or kBFloat16 (bf16 mixed precision:
  // float32 master weights, AdamW moments and gradients; docs/mixed-precision.md).
  DType precision = DType::kFloat32;
  // Where the run computes: the host, or a GPU (Device{kCUDA, i}; runtime/rank_compute.h). Not in
  // to_json: a checkpoint is the same on every device, and resumes on any.
  Device device = Device::cpu();

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
  // A step computed under another plan than the one holding the master state (bf16-only switches,
  // DistOptions::bf16_switches): what moved.
  std::optional<Bf16SwitchTraffic> bf16_switch;

  nlohmann::json to_json() const;  // one metrics JSONL line
};

// Errors naming the option at fault (steps, seq_len beyond the model's context, learning rates ...).
void validate_options(const TrainerOptions& options, const models::Model& model);
// Error unless every token id of `dataset` is inside the model's vocabulary: when the dataset was
// prepared for a larger vocabulary, its ids are scanned and the first one outside is named (its
// document and position); a dataset whose ids all fit trains.
void check_dataset_fits(const data::TokenDataset& dataset, const models::Model& model);

// AdamW, clipping and the warm-up + cosine schedule of a run (shared with DistTrainer).
graph::OptimizerOptions optimizer_options(const TrainerOptions& options);

}  // namespace hspmd::runtime
