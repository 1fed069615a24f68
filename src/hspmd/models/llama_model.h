// Llama as a models::Model (models/model.h): the contract's parts are the functions of llama.h
// (graph), llama_config.h (config, parameters) and llama_plan.h (strategy compiler), plus the feeds
// of its placeholders below. The same class serves every family built as a variant of Llama's
// decoder (Qwen2, Qwen3, Mistral, Gemma 3: models/decoder_families.h); model_type() is the family's.
//
//   std::shared_ptr<const Model> m = llama(LlamaConfig::from_file("configs/llama-tiny.json"));
//   runtime::Trainer t(m, dataset, options);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hspmd/data/packing.h"
#include "hspmd/graph/graph.h"
#include "hspmd/models/llama_config.h"
#include "hspmd/models/model.h"

namespace hspmd::models {

class Llama final : public Model {
 public:
  explicit Llama(LlamaConfig config);

  const LlamaConfig& config() const { return config_; }

  std::string model_type() const override { return config_.decoder.model_type; }
  nlohmann::json config_json() const override;
  nlohmann::json canonical_config(const nlohmann::json& saved, const std::string& source) const override;
  std::vector<ParamSpec> parameters() const override;
  int num_layers() const override { return static_cast<int>(config_.num_hidden_layers); }
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_sequence_length() const override { return config_.max_position_embeddings; }
  // The "rotary_emb.inv_freq" buffers older exports carry, and "lm_head.weight" when tied.
  bool recomputes_hf_tensor(const std::string& name) const override;
  std::string hf_weights_dtype() const override { return config_.weights_dtype; }
  std::string describe() const override;  // models/llama_description.h
  ModelSizes sizes() const override;
  std::shared_ptr<const Model> with_num_layers(int layers) const override;
  std::string summary() const override;  // ", tied embeddings" when they are
  ModelGraph build(const ModelBuildOptions& options) const override;
  sharding::AnnotationPlan compile_plan(const sharding::Strategy& strategy) const override;
  graph::TensorMap feeds(const data::Batch& batch, int64_t label_tokens,
                         const std::vector<int64_t>& order) const override;
  // Its pipeline's token_order_degree: the least common multiple of its stages' CP degrees (llama_plan.h).
  int context_parallel_degree(const sharding::AnnotationPlan& plan, int rank) const override;

 private:
  LlamaConfig config_;
};

std::shared_ptr<const Model> llama(const LlamaConfig& config);

// The feeds of the Llama placeholders (models/llama.h) for one packed batch; loss_scale =
// 1 / label_tokens. With `order`, fed token i is the batch's token order[i] and token_index = order
// (the load-balanced layout of a context-parallel pipeline, data/context_parallel.h).
graph::TensorMap llama_feeds(const data::Batch& batch, int64_t label_tokens);
graph::TensorMap llama_feeds(const data::Batch& batch, int64_t label_tokens, const std::vector<int64_t>& order);

}  // namespace hspmd::models
