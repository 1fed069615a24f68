#include "hspmd/models/llama_model.h"

#include <utility>

#include "hspmd/core/error.h"
#include "hspmd/models/llama.h"
#include "hspmd/models/llama_description.h"
#include "hspmd/models/llama_plan.h"

namespace hspmd::models {

Llama::Llama(LlamaConfig config) : config_(std::move(config)) { config_.validate(); }

std::shared_ptr<const Model> llama(const LlamaConfig& config) { return std::make_shared<const Llama>(config); }

nlohmann::json Llama::config_json() const { return nlohmann::json::parse(config_.to_json_text()); }

nlohmann::json Llama::canonical_config(const nlohmann::json& saved, const std::string& source) const {
  // Through the parser: a checkpoint written with older key names compares in today's spelling.
  return nlohmann::json::parse(LlamaConfig::from_json_text(saved.dump(), source).to_json_text());
}

std::vector<ParamSpec> Llama::parameters() const {
  std::vector<ParamSpec> out;
  for (const LlamaParam& p : llama_parameters(config_)) out.push_back({p.name, p.shape});
  return out;
}

bool Llama::recomputes_hf_tensor(const std::string& name) const {
  if (name.ends_with("rotary_emb.inv_freq")) return true;  // a buffer older exports carry
  return config_.tie_word_embeddings && name == "lm_head.weight";  // tied: the embedding table itself
}

std::string Llama::describe() const { return describe_llama(config_); }

ModelSizes Llama::sizes() const {
  ModelSizes s;
  s.layers = config_.num_hidden_layers;
  s.hidden = config_.hidden_size;
  s.ffn = config_.intermediate_size;
  s.heads = config_.num_attention_heads;
  s.kv_heads = config_.num_key_value_heads;
  s.vocab = config_.vocab_size;
  s.head_dim = config_.head_dim();
  if (!config_.decoder.sliding_layers.empty()) {
    for (int l = 0; l < config_.num_hidden_layers; ++l) s.attention_windows.push_back(config_.decoder.window_of(l));
  }
  for (const LlamaParam& p : llama_parameters(config_)) {
    const double n = static_cast<double>(p.shape.numel());
    if (p.layer == 0) {
      s.layer_parameters += n;
      if (p.role == LlamaParamRole::kNorm || p.role == LlamaParamRole::kHeadNorm) s.layer_norm_parameters += n;
    } else if (p.layer < 0) {
      (p.role == LlamaParamRole::kEmbedding ? s.embedding_parameters : s.head_parameters) += n;
    }
  }
  return s;
}

std::shared_ptr<const Model> Llama::with_num_layers(int layers) const {
  LlamaConfig c = config_;
  c.num_hidden_layers = layers;
  c.decoder = c.decoder.with_layers(layers);
  return llama(c);
}

ModelGraph Llama::build(const ModelBuildOptions& options) const {
  LlamaModel m = build_llama(config_, {.with_backward = options.with_backward,
                                       .precision = options.precision,
                                       .fused_head_loss = options.fused_head_loss});
  return {.graph = std::move(m.graph),
          .loss = m.loss,
          .param_names = std::move(m.param_names),
          .params = std::move(m.params),
          .grads = std::move(m.grads)};
}

sharding::AnnotationPlan Llama::compile_plan(const sharding::Strategy& strategy) const {
  return compile_llama_plan(config_, strategy);
}

std::string Llama::summary() const {
  return Model::summary() + (config_.tie_word_embeddings ? ", tied embeddings" : "");
}

graph::TensorMap Llama::feeds(const data::Batch& batch, int64_t label_tokens, const std::vector<int64_t>& order) const {
  return llama_feeds(batch, label_tokens, order);
}

int Llama::context_parallel_degree(const sharding::AnnotationPlan& plan, int rank) const {
  const auto where = plan.at("token_index").locate(rank);  // the pipeline (subgroup) `rank` is in
  return where ? plan.pipelines.at(where->first).token_order_degree : 1;
}

namespace {

Tensor int64_tensor(const std::vector<int32_t>& values) {
  Tensor t = Tensor::empty(Shape{static_cast<int64_t>(values.size())}, DType::kInt64);
  int64_t* p = t.data<int64_t>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}

}  // namespace

graph::TensorMap llama_feeds(const data::Batch& batch, int64_t label_tokens) {
  return llama_feeds(batch, label_tokens, packed_order(batch.num_tokens()));
}

graph::TensorMap llama_feeds(const data::Batch& batch, int64_t label_tokens, const std::vector<int64_t>& order) {
  HSPMD_CHECK(label_tokens > 0) << "a batch without labelled tokens has no loss";
  HSPMD_CHECK(static_cast<int64_t>(order.size()) == batch.num_tokens())
      << "token order of " << order.size() << " entries for a batch of " << batch.num_tokens() << " tokens";
  auto in_order = [&](const std::vector<int32_t>& v) {
    std::vector<int32_t> out(order.size());
    for (size_t i = 0; i < order.size(); ++i) out[i] = v[static_cast<size_t>(order[i])];
    return int64_tensor(out);
  };
  Tensor cu = Tensor::from_vector(Shape{static_cast<int64_t>(batch.cu_seqlens.size())}, batch.cu_seqlens);
  return {{"input_ids", in_order(batch.tokens)},
          {"positions", in_order(batch.positions)},
          {"cu_seqlens", cu},
          {"targets", in_order(batch.targets)},
          {"loss_scale", Tensor::full(Shape{}, DType::kFloat32, 1.0 / static_cast<double>(label_tokens))},
          {"token_index", Tensor::from_vector(Shape{static_cast<int64_t>(order.size())}, order)}};
}

}  // namespace hspmd::models
