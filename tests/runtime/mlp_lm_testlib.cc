#include "runtime/mlp_lm_testlib.h"

#include <map>

#include "hspmd/core/error.h"
#include "hspmd/graph/autograd.h"
#include "hspmd/graph/ops.h"
#include "hspmd/sharding/stage_annotation.h"

namespace hspmd::runtime::testing {

using graph::TensorRef;
using sharding::Annotation;
using sharding::DeviceGroup;
using sharding::DistState;
using sharding::kDuplicate;
using sharding::on_stages;
namespace ops = graph::ops;

namespace {

enum class Role { kEmbedding, kNorm, kColumn, kColumnBias, kRow, kHead };

struct Param {
  std::string name;
  Shape shape;
  Role role;
  int block;  // -1: embedding, final norm and head
};

std::vector<Param> params_of(const MlpLmConfig& c) {
  const int64_t V = c.vocab_size, H = c.hidden, F = c.width;
  std::vector<Param> out{{"embed.weight", Shape{V, H}, Role::kEmbedding, -1}};
  for (int l = 0; l < c.num_blocks; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    out.push_back({p + "norm.weight", Shape{H}, Role::kNorm, l});
    out.push_back({p + "gate.weight", Shape{F, H}, Role::kColumn, l});
    out.push_back({p + "up.weight", Shape{F, H}, Role::kColumn, l});
    out.push_back({p + "up.bias", Shape{F}, Role::kColumnBias, l});
    out.push_back({p + "down.weight", Shape{H, F}, Role::kRow, l});
  }
  out.push_back({"final_norm.weight", Shape{H}, Role::kNorm, -1});
  out.push_back({"head.weight", Shape{V, H}, Role::kHead, -1});
  return out;
}

Tensor int64_tensor(const std::vector<int32_t>& values, const std::vector<int64_t>& order) {
  Tensor t = Tensor::empty(Shape{static_cast<int64_t>(order.size())}, DType::kInt64);
  for (size_t i = 0; i < order.size(); ++i) t.data<int64_t>()[i] = values[static_cast<size_t>(order[i])];
  return t;
}

}  // namespace

nlohmann::json MlpLm::config_json() const {
  return {{"model_type", model_type()},
          {"vocab_size", config_.vocab_size},
          {"hidden", config_.hidden},
          {"width", config_.width},
          {"num_blocks", config_.num_blocks},
          {"max_length", config_.max_length}};
}

nlohmann::json MlpLm::canonical_config(const nlohmann::json& saved, const std::string& source) const {
  HSPMD_CHECK(saved.value("model_type", std::string()) == model_type())
      << source << ": the model config is not a " << model_type() << "'s";
  return saved;
}

std::vector<models::ParamSpec> MlpLm::parameters() const {
  std::vector<models::ParamSpec> out;
  for (const Param& p : params_of(config_)) out.push_back({p.name, p.shape});
  return out;
}

std::string MlpLm::describe() const {
  return "architecture: an MLP language model of " + std::to_string(config_.num_blocks) + " blocks, hidden " +
         std::to_string(config_.hidden) + ", width " + std::to_string(config_.width) + "\n";
}

models::ModelSizes MlpLm::sizes() const {
  models::ModelSizes s{.layers = config_.num_blocks, .hidden = config_.hidden, .ffn = config_.width,
                       .vocab = config_.vocab_size};
  for (const Param& p : params_of(config_)) {
    const double n = static_cast<double>(p.shape.numel());
    if (p.name.starts_with("blocks.0.")) {
      s.layer_parameters += n;
    } else if (p.name == "embed.weight") {
      s.embedding_parameters += n;
    } else if (!p.name.starts_with("blocks.")) {
      s.head_parameters += n;
    }
  }
  return s;
}

std::shared_ptr<const models::Model> MlpLm::with_num_layers(int layers) const {
  HSPMD_CHECK(layers >= 1) << "test MLP LM: " << layers << " blocks";
  MlpLmConfig c = config_;
  c.num_blocks = layers;
  return mlp_lm(c);
}

models::ModelGraph MlpLm::build(const models::ModelBuildOptions& options) const {
  const bool bf16 = options.precision == DType::kBFloat16;
  models::ModelGraph m;
  graph::Graph& g = m.graph;
  const SymExpr T = SymExpr::symbol("T");
  const TensorRef tokens = g.placeholder("tokens", {T}, DType::kInt64);
  const TensorRef labels = g.placeholder("labels", {T}, DType::kInt64);
  const TensorRef loss_scale = g.placeholder("loss_scale", {}, DType::kFloat32);
  std::map<std::string, TensorRef> w;
  for (const Param& p : params_of(config_)) {
    const graph::InitSpec init = p.role == Role::kNorm         ? graph::InitSpec::ones()
                                 : p.role == Role::kColumnBias ? graph::InitSpec::zeros()
                                                               : graph::InitSpec::normal(0.05);
    g.set_layer(p.block);
    w[p.name] = g.parameter(p.name, p.shape, DType::kFloat32, init);
    m.param_names.push_back(p.name);
    m.params.push_back(w[p.name]);
  }
  g.set_layer(-1);
  auto linear = [&](TensorRef x, const std::string& weight, const std::string& name) {
    return ops::matmul(g, x, w.at(weight), {.trans_b = true, .bf16_operands = bf16}, name);
  };
  TensorRef x = ops::reshard(g, ops::embedding(g, w.at("embed.weight"), tokens, "embed"), "embed_out");
  for (int l = 0; l < config_.num_blocks; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    g.set_layer(l);
    TensorRef h = ops::reshard(g, ops::rms_norm(g, x, w.at(p + "norm.weight"), 1e-5, p + "norm"), p + "in");
    TensorRef up = ops::bias_add(g, linear(h, p + "up.weight", p + "up"), w.at(p + "up.bias"), p + "up.bias_add");
    TensorRef a = ops::swiglu(g, linear(h, p + "gate.weight", p + "gate"), up, p + "act");
    x = ops::add(g, x, ops::reshard(g, linear(a, p + "down.weight", p + "down"), p + "out"), p + "residual");
    x = ops::reshard(g, x, p + "output");
    g.set_layer(-1);
  }
  x = ops::rms_norm(g, x, w.at("final_norm.weight"), 1e-5, "final_norm");
  TensorRef logits = ops::reshard(g, linear(x, "head.weight", "head"), "logits");
  m.loss = ops::cross_entropy(g, logits, labels, loss_scale, -100, "loss");
  if (options.with_backward) m.grads = graph::build_backward(g, m.loss, m.params);
  return m;
}

sharding::AnnotationPlan MlpLm::compile_plan(const sharding::Strategy& st) const {
  st.validate(config_.num_blocks);
  for (const auto& pipe : st.pipelines) {
    for (const auto& stage : pipe.stages) {
      HSPMD_CHECK(stage.cp == 1) << "strategy " << st.name << ": " << model_type() << " has no context parallelism";
      const int tp = stage.tp();
      HSPMD_CHECK(config_.vocab_size % tp == 0 && config_.width % tp == 0)
          << "strategy " << st.name << ": TP degree " << tp << " does not divide the vocabulary or the width";
    }
  }
  auto stages_where = [&](auto pick) {
    std::vector<const sharding::StageSpec*> out;
    for (size_t p = 0; p < st.pipelines.size(); ++p) out.push_back(pick(p));
    return out;
  };
  const auto first = stages_where([&](size_t p) { return &st.pipelines[p].stages.front(); });
  const auto last = stages_where([&](size_t p) { return &st.pipelines[p].stages.back(); });
  auto of_block = [&](int l) {
    return stages_where([&](size_t p) { return &st.pipelines[p].stages[st.stage_of_layer(static_cast<int>(p), l)]; });
  };
  // Per-token values: split by tokens across pipelines, duplicated over a stage's TP ranks.
  auto activation = [](const std::vector<const sharding::StageSpec*>& stages) {
    return on_stages(stages, [](const sharding::StageSpec& s) { return DistState::make({{kDuplicate, s.tp()}}); }, 0);
  };

  sharding::AnnotationPlan plan;
  for (const Param& p : params_of(config_)) {
    const auto stages = p.block >= 0 ? of_block(p.block) : p.role == Role::kEmbedding ? first : last;
    const Annotation a = on_stages(
        stages,
        [&](const sharding::StageSpec& s) {
          switch (p.role) {
            case Role::kEmbedding:
            case Role::kHead:
            case Role::kColumn:
            case Role::kColumnBias:
              return DistState::make({{0, s.tp()}}, st.shards_optimizer_states());
            case Role::kRow:
              return DistState::make({{1, s.tp()}}, st.shards_optimizer_states());
            case Role::kNorm:
              break;
          }
          return DistState::make({{kDuplicate, s.tp()}}, st.shards_optimizer_states());
        },
        kDuplicate);
    a.validate_for(p.shape, p.name);
    plan.set(p.name, a);
    if (st.shards_optimizer_states()) plan.set_optimizer_state(p.name, a.optimizer_state(p.shape));
  }
  plan.set("tokens", activation(first));
  plan.set("labels", activation(last));
  plan.set("loss_scale",
           on_stages(last, [](const sharding::StageSpec& s) { return DistState::dup(s.tp()); }, kDuplicate));
  plan.set("embed_out", activation(first));  // vocab-parallel partial sums -> all-reduce
  for (int l = 0; l < config_.num_blocks; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    plan.set(p + "in", activation(of_block(l)));
    plan.set(p + "out", activation(of_block(l)));  // row-parallel partial sums -> all-reduce
    // The block's output goes to the stage of the next consumer: the next block or the head.
    plan.set(p + "output", activation(l + 1 < config_.num_blocks ? of_block(l + 1) : last));
  }
  plan.set("logits", on_stages(last, [](const sharding::StageSpec& s) { return DistState::split(1, s.tp()); }, 0));
  for (const auto& pipe : st.pipelines) plan.pipelines.push_back({pipe.micro_batch_size, pipe.num_micro_batches});
  plan.recompute = st.recompute;
  plan.shard_gradients = st.shards_gradients();
  return plan;
}

graph::TensorMap MlpLm::feeds(const data::Batch& batch, int64_t label_tokens, const std::vector<int64_t>& order) const {
  HSPMD_CHECK(label_tokens > 0) << "a batch without labelled tokens has no loss";
  return {{"tokens", int64_tensor(batch.tokens, order)},
          {"labels", int64_tensor(batch.targets, order)},
          {"loss_scale", Tensor::full(Shape{}, DType::kFloat32, 1.0 / static_cast<double>(label_tokens))}};
}

std::shared_ptr<const models::Model> mlp_lm(MlpLmConfig config) { return std::make_shared<const MlpLm>(config); }

}  // namespace hspmd::runtime::testing
