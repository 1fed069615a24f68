// A second model for the model contract (models/model.h), deliberately unlike Llama, so the tests
// prove that the trainer, switching and checkpoints need nothing but the contract: a token-wise MLP
// language model (each token predicts the next from its own embedding; no attention, no positions,
// no document boundaries), with its own placeholder and parameter names.
//
// Graph (T tokens; H hidden, F MLP width, V vocabulary):
//   tokens [T] int64, labels [T] int64 (-100: none), loss_scale []
//   "embed" (embedding [V, H]) -> Reshard "embed_out"
//   per block l (prefix P = "blocks.<l>."):
//     x -> P"norm" (rms_norm) -> Reshard P"in" -> P"gate", P"up" (+ P"up.bias") -> swiglu
//       -> P"down" -> Reshard P"out" -> residual add -> Reshard P"output"
//   "final_norm" -> "head" (matmul [T, V]) -> Reshard "logits" -> cross_entropy "loss"
// Parameters: embed.weight [V, H]; P"norm.weight" [H]; P"gate.weight", P"up.weight" [F, H];
// P"up.bias" [F]; P"down.weight" [H, F]; final_norm.weight [H]; head.weight [V, H].
// Plans (compile_plan): TP inside a stage (embedding and head vocab-parallel, gate/up column-, down
// row-parallel, the logits split on the vocabulary), pipelines as data-parallel replicas, ZeRO-1.
// Context parallelism is refused: the model has no sequence to split.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "hspmd/models/model.h"

namespace hspmd::runtime::testing {

struct MlpLmConfig {
  int64_t vocab_size = 260;  // the byte-level corpus
  int64_t hidden = 32;
  int64_t width = 64;
  int num_blocks = 4;
  int64_t max_length = 512;
};

class MlpLm final : public models::Model {
 public:
  explicit MlpLm(MlpLmConfig config) : config_(config) {}

  std::string model_type() const override { return "test-mlp-lm"; }
  nlohmann::json config_json() const override;
  nlohmann::json canonical_config(const nlohmann::json& saved, const std::string& source) const override;
  std::vector<models::ParamSpec> parameters() const override;
  int num_layers() const override { return config_.num_blocks; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_sequence_length() const override { return config_.max_length; }
  // No buffers and no tied weights: its safetensors hold exactly parameters(), as saved (float32).
  bool recomputes_hf_tensor(const std::string&) const override { return false; }
  std::string hf_weights_dtype() const override { return "float32"; }
  std::string describe() const override;
  models::ModelSizes sizes() const override;  // no attention: heads 0
  std::shared_ptr<const models::Model> with_num_layers(int layers) const override;
  models::ModelGraph build(const models::ModelBuildOptions& options) const override;
  sharding::AnnotationPlan compile_plan(const sharding::Strategy& strategy) const override;
  graph::TensorMap feeds(const data::Batch& batch, int64_t label_tokens,
                         const std::vector<int64_t>& order) const override;
  int context_parallel_degree(const sharding::AnnotationPlan&, int) const override { return 1; }

 private:
  MlpLmConfig config_;
};

std::shared_ptr<const models::Model> mlp_lm(MlpLmConfig config = {});

}  // namespace hspmd::runtime::testing
