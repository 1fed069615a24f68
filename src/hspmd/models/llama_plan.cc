#include "hspmd/models/llama_plan.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hspmd/core/error.h"
#include "hspmd/models/llama.h"

namespace hspmd::models {

using sharding::Annotation;
using sharding::DeviceGroup;
using sharding::DistState;
using sharding::kDuplicate;
using sharding::Strategy;

namespace {

std::string p_of(int layer) { return "model.layers." + std::to_string(layer) + "."; }

std::string stage_key(size_t p, size_t s) {
  return "pipelines[" + std::to_string(p) + "].stages[" + std::to_string(s) + "]";
}

void check_divides(int tp, int64_t size, const char* what, size_t p, size_t s, const Strategy& st) {
  HSPMD_CHECK(size % tp == 0) << "strategy " << st.name << ": " << stage_key(p, s) << ": TP degree " << tp
                              << " (ranks " << DeviceGroup(st.pipelines[p].stages[s].ranks).to_string()
                              << ") does not divide " << what << " " << size;
}

// The stage of pipeline p that holds a parameter of `layer` (-1: embedding / final norm / lm_head).
const sharding::StageSpec& stage_for(const Strategy& st, size_t p, const LlamaParam& param) {
  const auto& stages = st.pipelines[p].stages;
  if (param.layer >= 0) return stages[st.stage_of_layer(static_cast<int>(p), param.layer)];
  return param.role == LlamaParamRole::kEmbedding ? stages.front() : stages.back();
}

// The TP sharding of a parameter inside a stage's TP group.
DistState tp_param_ds(LlamaParamRole role, int tp, bool zero) {
  switch (role) {
    case LlamaParamRole::kEmbedding:
    case LlamaParamRole::kLmHead:
    case LlamaParamRole::kQProj:
    case LlamaParamRole::kKProj:
    case LlamaParamRole::kVProj:
    case LlamaParamRole::kGateProj:
    case LlamaParamRole::kUpProj:
      return DistState::make({{0, tp}}, zero);
    case LlamaParamRole::kOProj:
    case LlamaParamRole::kDownProj:
      return DistState::make({{1, tp}}, zero);
    case LlamaParamRole::kNorm:
    // One weight for every head: each TP rank norms its own heads with the whole of it, and the
    // gradient, partial over the ranks' heads, is summed by the norm's deduction rule.
    case LlamaParamRole::kHeadNorm:
    case LlamaParamRole::kOBias:     // added after the all-reduce of the row-parallel output
    case LlamaParamRole::kDownBias:
      return DistState::make({{kDuplicate, tp}}, zero);
    case LlamaParamRole::kQBias:  // split like the column-parallel output it is added to
    case LlamaParamRole::kKBias:
    case LlamaParamRole::kVBias:
    case LlamaParamRole::kGateBias:
    case LlamaParamRole::kUpBias:
      return DistState::make({{0, tp}}, zero);
  }
  HSPMD_THROW() << "unknown Llama parameter role";
}

// On a stage of T x C ranks: duplicated over the CP coordinate (outer), TP-sharded inside (like
// data parallelism, the CP ranks hold the same weights and their gradients are summed over CP).
DistState with_cp(const DistState& tp_ds, int cp) {
  std::vector<DistState::Entry> entries{{kDuplicate, cp}};
  for (const DistState::Entry& e : tp_ds.entries()) {
    if (e.dim == kDuplicate && entries.size() == 1) {
      entries.front().degree *= e.degree;  // D:cp then D:tp is one duplicate digit
    } else {
      entries.push_back(e);
    }
  }
  return DistState::make(std::move(entries), tp_ds.zero());
}

DistState param_ds(LlamaParamRole role, const sharding::StageSpec& stage, bool zero) {
  return with_cp(tp_param_ds(role, stage.tp(), zero), stage.cp);
}

// Per-token values on a stage of T x C ranks: tokens split over CP (outer), `inner` over TP.
DistState tokens_ds(const sharding::StageSpec& s, int inner) {
  return DistState::make({{0, s.cp}, {inner, s.tp()}});
}

// Annotations over one stage of each pipeline, made once per (what, stages) and shared, over one
// device group per stage. A 70B model's 80 layers ask for the same few again and again (each
// layer's parameters and a dozen Reshards, over the 4 lists of stages of a 4-stage layout); making
// each again built one device group per pipeline and an index over all their ranks, a tenth of
// explaining 4,096 ranks. Shared, equal annotations and groups also compare by address in
// deduction and the report, not by reading every pipeline's group.
class OnStages {
 public:
  // `what` names the annotation (a Reshard kind, a parameter role): equal `what` on equal stages
  // must mean equal `ds` and `hdim`.
  template <typename DsOfStage>
  const Annotation& get(const std::string& what, const std::vector<const sharding::StageSpec*>& stages, DsOfStage ds,
                        int hdim) {
    auto key = std::make_pair(what, stages);
    auto it = made_.find(key);
    if (it != made_.end()) return it->second;
    std::vector<DeviceGroup> groups;
    std::vector<DistState> states;
    for (const sharding::StageSpec* s : stages) {
      auto [group, fresh] = groups_.try_emplace(s);
      if (fresh) group->second = DeviceGroup(s->ranks);
      groups.push_back(group->second);
      states.push_back(ds(*s));
    }
    return made_.emplace(std::move(key), Annotation::make(std::move(groups), std::move(states), hdim)).first->second;
  }

 private:
  std::map<const sharding::StageSpec*, DeviceGroup> groups_;
  std::map<std::pair<std::string, std::vector<const sharding::StageSpec*>>, Annotation> made_;
};

// Activations: split by tokens across pipelines (per-pipeline sizes at run time) and over CP inside
// a stage, duplicated in TP.
const Annotation& activation(OnStages& made, const std::vector<const sharding::StageSpec*>& stages) {
  return made.get("activation", stages, [](const sharding::StageSpec& s) { return tokens_ds(s, kDuplicate); }, 0);
}

// The activations between TP blocks: on a sequence-parallel stage split by tokens over the TP ranks
// too (each CP rank's contiguous tokens cut in T: one split of T x C, CP outer), else as above.
const Annotation& between_blocks(OnStages& made, const std::vector<const sharding::StageSpec*>& stages) {
  return made.get(
      "between_blocks", stages,
      [](const sharding::StageSpec& s) {
        return s.sequence_parallel ? DistState::split(0, s.cp * s.tp()) : tokens_ds(s, kDuplicate);
      },
      0);
}

// A parameter on the stage of each pipeline that holds it; parameters of one role on the same
// stages (every layer's of that role on one stage) share one annotation.
const Annotation& param_annotation(OnStages& made, const LlamaParam& param, const Strategy& st) {
  std::vector<const sharding::StageSpec*> stages;
  for (size_t p = 0; p < st.pipelines.size(); ++p) stages.push_back(&stage_for(st, p, param));
  const bool zero = st.shards_optimizer_states();
  return made.get(
      "parameter " + std::to_string(static_cast<int>(param.role)), stages,
      [&](const sharding::StageSpec& s) { return param_ds(param.role, s, zero); }, kDuplicate);
}

}  // namespace

void validate_llama_strategy(const LlamaConfig& c, const Strategy& st) {
  st.validate(static_cast<int>(c.num_hidden_layers));
  for (size_t p = 0; p < st.pipelines.size(); ++p) {
    const auto& stages = st.pipelines[p].stages;
    for (size_t s = 0; s < stages.size(); ++s) {
      const int tp = stages[s].tp();
      HSPMD_CHECK(stages[s].cp >= 1 && stages[s].ranks.size() == static_cast<size_t>(tp) * stages[s].cp)
          << "strategy " << st.name << ": " << stage_key(p, s) << ": cp " << stages[s].cp << " does not divide its "
          << stages[s].ranks.size() << " ranks " << DeviceGroup(stages[s].ranks).to_string();
      check_divides(tp, c.num_attention_heads, "num_attention_heads", p, s, st);
      check_divides(tp, c.num_key_value_heads, "num_key_value_heads", p, s, st);
      check_divides(tp, c.hidden_size, "hidden_size", p, s, st);
      check_divides(tp, c.intermediate_size, "intermediate_size", p, s, st);
      if (s == 0 || s + 1 == stages.size()) check_divides(tp, c.vocab_size, "vocab_size", p, s, st);
    }
  }
}

Annotation llama_param_annotation(const LlamaParam& param, const Strategy& st) {
  OnStages made;
  return param_annotation(made, param, st);
}

sharding::AnnotationPlan compile_llama_plan(const LlamaConfig& config, const Strategy& st) {
  validate_llama_strategy(config, st);
  sharding::AnnotationPlan plan;
  OnStages made;
  // A parameter's optimizer state, once per annotation and shape (every layer's of one role).
  std::map<std::pair<const Annotation*, std::string>, Annotation> optimizer_states;
  for (const LlamaParam& param : llama_parameters(config)) {
    const Annotation& a = param_annotation(made, param, st);
    a.validate_for(param.shape, param.name);
    plan.set(param.name, a);
    if (!st.shards_optimizer_states()) continue;
    auto [state, fresh] = optimizer_states.try_emplace({&a, param.shape.to_string()});
    if (fresh) state->second = a.optimizer_state(param.shape);
    plan.set_optimizer_state(param.name, state->second);
  }
  // Stage of each pipeline: the first, the last, the one holding layer l.
  auto stages_where = [&](auto pick) {
    std::vector<const sharding::StageSpec*> out;
    for (size_t p = 0; p < st.pipelines.size(); ++p) out.push_back(pick(p));
    return out;
  };
  auto first = stages_where([&](size_t p) { return &st.pipelines[p].stages.front(); });
  auto last = stages_where([&](size_t p) { return &st.pipelines[p].stages.back(); });
  auto of_layer = [&](int l) {
    return stages_where([&](size_t p) { return &st.pipelines[p].stages[st.stage_of_layer(static_cast<int>(p), l)]; });
  };
  // Every rank of a pipeline reads the batch layout (positions, document offsets) for its own layers.
  // Every stage splits the pipeline's fed token order evenly over its CP ranks, so a split of that
  // order into g = gcd of the stages' CP degrees parts gives part k to stage ranks of every stage
  // (CP coordinates k*c/g to (k+1)*c/g - 1 of a stage with CP c). The pipeline's group lists those
  // ranks part by part, so per-token values split g ways reach each rank with its own tokens in them.
  std::vector<DeviceGroup> pipeline_groups;
  std::vector<DistState> pipeline_tokens, pipeline_dup;
  for (const auto& pipe : st.pipelines) {
    const int g = pipe.common_cp();
    std::vector<int> ranks;
    for (int k = 0; k < g; ++k) {
      for (const auto& stage : pipe.stages) {
        const int part = static_cast<int>(stage.ranks.size()) / g;
        ranks.insert(ranks.end(), stage.ranks.begin() + k * part, stage.ranks.begin() + (k + 1) * part);
      }
    }
    const int n = static_cast<int>(ranks.size());
    pipeline_tokens.push_back(DistState::make({{0, g}, {kDuplicate, n / g}}));
    pipeline_dup.push_back(DistState::dup(n));
    pipeline_groups.emplace_back(std::move(ranks));
  }
  const Annotation pipeline_token_values = Annotation::make(pipeline_groups, pipeline_tokens, 0);

  plan.set("input_ids", activation(made, first));
  plan.set("positions", pipeline_token_values);
  plan.set("token_index", pipeline_token_values);
  plan.set("cu_seqlens", Annotation::make(pipeline_groups, pipeline_dup, 0));
  plan.set("targets", activation(made, last));
  plan.set("loss_scale",  // one scalar, the same everywhere
           made.get("loss_scale", last, [](const sharding::StageSpec& s) { return DistState::dup(s.cp * s.tp()); },
                    kDuplicate));
  // The vocab-parallel partial sum: all-reduced, or reduce-scattered by tokens under SP.
  plan.set("model.embed_out", between_blocks(made, first));
  const int L = static_cast<int>(config.num_hidden_layers);
  for (int l = 0; l < L; ++l) {
    const auto of_l = of_layer(l);
    const Annotation& here = activation(made, of_l);
    const std::vector<std::string> names = llama_layer_reshard_names(l);
    for (const std::string& name : names) plan.set(name, here);
    // Sequence parallelism: the row-parallel outputs are reduce-scattered by tokens (the residual
    // adds, the norms and the biases after them run on the TP rank's tokens); the column-parallel
    // inputs ("attn_in", "mlp_in", as above) all-gather them back.
    plan.set(p_of(l) + "attn_out", between_blocks(made, of_l));
    plan.set(p_of(l) + "mlp_out", between_blocks(made, of_l));
    // Attention reads the offsets, every row's packed position and every key/value row of the batch:
    // all-gathered over CP (each stage's whole group holds them), the identity without CP.
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const Annotation& whole_batch =
        made.get("whole_batch", of_l, [](const sharding::StageSpec& s) { return DistState::dup(s.cp * s.tp()); }, 0);
    plan.set(p + "cu_seqlens", whole_batch);
    plan.set(p + "kv_index", whole_batch);
    const Annotation& kv_heads = made.get(
        "kv_heads", of_l, [](const sharding::StageSpec& s) { return DistState::make({{kDuplicate, s.cp}, {1, s.tp()}}); },
        0);
    plan.set(p + "self_attn.k_all", kv_heads);
    plan.set(p + "self_attn.v_all", kv_heads);
    // The layer's output goes to the stage of the next consumer: the next layer, or the final norm
    // (on every token of the TP group: the head's matmul reads them all).
    plan.set(names.back(), l + 1 < L ? between_blocks(made, of_layer(l + 1)) : activation(made, last));
  }
  // The logits stay vocab-parallel: the loss normalizes each row across the TP ranks itself.
  plan.set("lm_head_out", made.get("logits", last, [](const sharding::StageSpec& s) { return tokens_ds(s, 1); }, 0));
  if (config.tie_word_embeddings) {  // the table, vocab-parallel on each last stage
    plan.set("lm_head.tied_weight",
             made.get(
                 "tied_weight", last,
                 [](const sharding::StageSpec& s) { return with_cp(DistState::split(0, s.tp()), s.cp); }, kDuplicate));
    // Its gradient goes home to the first stage in the layout of the lookup's own gradient (the whole
    // table on every TP rank; a partial sum over the pipelines' data), so the two add up there.
    const int hdim = st.pipelines.size() > 1 ? sharding::kPartial : kDuplicate;
    // Under CP both are partial over the CP ranks (each sums its own tokens' terms).
    plan.set("lm_head.tied_weight.bwd",
             made.get(
                 "tied_weight_gradient", first,
                 [](const sharding::StageSpec& s) {
                   return DistState::make({{sharding::kPartial, s.cp}, {kDuplicate, s.tp()}});
                 },
                 hdim));
  }
  for (const auto& pipe : st.pipelines) {
    plan.pipelines.push_back(
        {pipe.micro_batch_size, pipe.num_micro_batches, pipe.token_order_degree(), st.sequence_parallel_multiple()});
  }
  plan.recompute = st.recompute;
  plan.shard_gradients = st.shards_gradients();
  plan.shard_parameters = st.shards_parameters();
  return plan;
}

}  // namespace hspmd::models
