// The model contract: everything the layers above models/ (runtime, elastic, the CLI's training)
// know about a model. A model family implements it once; the trainer, checkpoints, switching and
// elastic recovery then work for it unchanged. Llama implements it (models/llama_model.h); a second,
// deliberately different model in the tests (tests/runtime/mlp_lm_testlib.h) proves nothing above
// this interface assumes Llama.
//
//   std::shared_ptr<const Model> m = load_model("configs/llama-tiny.json");  // by "model_type"
//   ModelGraph g = m->build({.precision = DType::kBFloat16});    // the defined graph + its roles
//   AnnotationPlan plan = m->compile_plan(Strategy::from_file("local-hetero-4.json"));
//   TensorMap feeds = m->feeds(data::pack(segments, {.seq_len = 256}), labels, order);
//
// What a model provides:
//   config       its config.json as canonical JSON (saved in checkpoints, compared on resume);
//   graph        the single-device training graph: placeholders fed by feeds(), parameters named as
//                Hugging Face names them, each carrying its initializer (graph/init.h: a function of
//                seed, name and element index, so every strategy starts from the same weights), one
//                scalar loss (loss_scale x the sum of token losses) and, with backward, a gradient
//                per parameter;
//   plan         the strategy-file -> annotation-plan compiler: every parameter, placeholder and
//                stage-boundary Reshard annotated for a Strategy (pipelines, stages, TP, CP, ZeRO-1);
//   feeds        the placeholders' values for one packed batch (data/packing.h), tokens in the order
//                the trainer gives (a context-parallel pipeline's load-balanced order);
//   HF weights   what its Hugging Face safetensors hold besides parameters() (tensors it recomputes
//                rather than loads) and the dtype its config says they are stored in, so the import,
//                audit and export of runtime/hf_weights.h and runtime/hf_export.h need no model names;
//   sizes        what the planner's cost model prices it by, and the same model with fewer layers
//                (the profiler times 1- and 3-layer models to tell a layer from the ends);
//   summary      the line `hspmd checkpoint info` prints about it (a default from sizes()).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "hspmd/core/shape.h"
#include "hspmd/data/packing.h"
#include "hspmd/graph/graph.h"
#include "hspmd/sharding/plan.h"
#include "hspmd/sharding/strategy.h"

namespace hspmd::models {

// How to build the training graph; every model honours each field.
struct ModelBuildOptions {
  // kFloat32, or kBFloat16 for bf16 mixed precision: matmuls (and attention) round their operands to
  // bfloat16 and accumulate in float32; parameters, gradients and the optimizer stay float32.
  DType precision = DType::kFloat32;
  // The output head and its loss as one fused op or apart; unset: the model's default. A model
  // without the choice ignores it (both forms compute the same loss and gradients).
  std::optional<bool> fused_head_loss{};
  bool with_backward = true;  // also build d loss / d every parameter (false: evaluation)
};

// The defined graph of a model and the roles of its tensors.
struct ModelGraph {
  graph::Graph graph;
  graph::TensorRef loss;                 // [] loss_scale x sum of token losses
  std::vector<std::string> param_names;  // Hugging Face names, in Model::parameters() order
  std::vector<graph::TensorRef> params;  // same order
  std::vector<graph::TensorRef> grads;   // same order; empty without backward
};

// One parameter: its Hugging Face name and global shape.
struct ParamSpec {
  std::string name;
  Shape shape;
};

// The sizes the planner's cost model (planner/cost_model.h) prices a model by: `layers` identical
// decoder layers between an embedding (on a pipeline's first stage) and a head (on its last).
struct ModelSizes {
  int64_t layers = 0, hidden = 0, ffn = 0, vocab = 0;
  int64_t heads = 0, kv_heads = 0;  // attention heads and key/value heads; 0 without attention
  // The width of one attention head (0 without attention). Not always hidden / heads (a config's
  // "head_dim"): the derived profile (planner/derived_profile.h) prices K and V by it.
  int64_t head_dim = 0;
  double layer_parameters = 0;      // one decoder layer
  // Of layer_parameters, the normalization weights: the derived profile counts matmul FLOPs by the
  // rest of them.
  double layer_norm_parameters = 0;
  double embedding_parameters = 0;  // the input embedding
  double head_parameters = 0;       // what follows the last layer (final norm, output head)
  // Per decoder layer, the sliding window of its attention: a token attends to itself and the
  // window - 1 positions before it in its document; 0: to every earlier position. Empty when no
  // layer slides. The cost model prices a layer's attention by it (planner/cost_model.h).
  std::vector<int64_t> attention_windows{};
};

class Model {
 public:
  virtual ~Model() = default;

  // The config.json "model_type" this model reads ("llama").
  virtual std::string model_type() const = 0;
  // The config in canonical JSON: equal configs give equal JSON.
  virtual nlohmann::json config_json() const = 0;
  // A config saved by an earlier run (a checkpoint's) in today's canonical JSON, so that it compares
  // with config_json() key by key; Error naming `source` and the key when it is not this model's.
  virtual nlohmann::json canonical_config(const nlohmann::json& saved, const std::string& source) const = 0;

  // Every parameter in the graph's order.
  virtual std::vector<ParamSpec> parameters() const = 0;
  // Decoder layers (the unit of pipeline stages and of per-layer recomputation).
  virtual int num_layers() const = 0;
  // Token ids the model embeds: [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;
  // The longest sequence the model may be trained on (its position limit).
  virtual int64_t max_sequence_length() const = 0;

  // True for a tensor a Hugging Face export of this model may carry that is not one of parameters()
  // because the model recomputes it (a buffer, a tied weight): skipped on load, not "extra".
  virtual bool recomputes_hf_tensor(const std::string& name) const = 0;
  // The dtype name ("float32", "bfloat16", ...) the config says its Hugging Face weights are stored
  // in; the model computes in its own dtype whatever this says.
  virtual std::string hf_weights_dtype() const = 0;
  // For humans (`hspmd model info`): the architecture, what sets it apart, and the parameters'
  // shapes; one line per fact.
  virtual std::string describe() const = 0;

  virtual ModelSizes sizes() const = 0;
  // This model with `layers` decoder layers, everything else alike; Error when it cannot have them.
  virtual std::shared_ptr<const Model> with_num_layers(int layers) const = 0;
  // One line for listings (`hspmd checkpoint info`): "4 layers, hidden 128, 4 heads (2 key/value),
  // intermediate 352, vocab 260, 1234 parameters" from sizes(), plus what a model adds to it.
  virtual std::string summary() const;

  virtual ModelGraph build(const ModelBuildOptions& options) const = 0;
  // Error naming the pipeline or stage at fault when the strategy does not fit the model.
  virtual sharding::AnnotationPlan compile_plan(const sharding::Strategy& strategy) const = 0;
  // The feeds of every placeholder for one packed batch; loss_scale = 1 / label_tokens; fed token i
  // is the batch's token order[i].
  virtual graph::TensorMap feeds(const data::Batch& batch, int64_t label_tokens,
                                 const std::vector<int64_t>& order) const = 0;
  // The degree of the load-balanced token order `rank`'s pipeline is fed in under `plan` (context
  // parallelism, docs/context-parallelism.md): a multiple of the CP degree of each of its stages,
  // which split that order evenly (the least common multiple of those degrees when they differ);
  // 1 without CP or on a rank the plan does not feed.
  virtual int context_parallel_degree(const sharding::AnnotationPlan& plan, int rank) const = 0;
};

// 0, 1, ..., tokens - 1: the order of a batch fed as packed.
std::vector<int64_t> packed_order(int64_t tokens);

// The elements of every parameter together.
int64_t num_parameters(const Model& model);
// (name, global shape) of every parameter, in the model's order: what checkpoints, switching plans
// and the planner's switch costs are keyed by.
std::vector<std::pair<std::string, Shape>> parameter_shapes(const Model& model);

}  // namespace hspmd::models
