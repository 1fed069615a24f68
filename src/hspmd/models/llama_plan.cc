#include "hspmd/models/llama_plan.h"

#include <string>

#include "hspmd/core/error.h"
#include "hspmd/models/llama.h"

namespace hspmd::models {

using sharding::Annotation;
using sharding::DeviceGroup;
using sharding::DistState;
using sharding::kDuplicate;
using sharding::Strategy;

namespace {

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

DistState param_ds(LlamaParamRole role, int tp, bool zero) {
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

// One subgroup per pipeline (the given stage of each), each sharded by `ds(tp)`.
template <typename DsOfTp>
Annotation on_stages(const std::vector<const sharding::StageSpec*>& stages, DsOfTp ds, int hdim) {
  std::vector<DeviceGroup> groups;
  std::vector<DistState> states;
  for (const auto* s : stages) {
    groups.emplace_back(s->ranks);
    states.push_back(ds(s->tp()));
  }
  return Annotation::make(std::move(groups), std::move(states), hdim);
}

// Activations: split by tokens across pipelines (per-pipeline sizes at run time), duplicated in TP.
Annotation activation(const std::vector<const sharding::StageSpec*>& stages) {
  return on_stages(stages, [](int tp) { return DistState::dup(tp); }, 0);
}

}  // namespace

void validate_llama_strategy(const LlamaConfig& c, const Strategy& st) {
  st.validate(static_cast<int>(c.num_hidden_layers));
  for (size_t p = 0; p < st.pipelines.size(); ++p) {
    const auto& stages = st.pipelines[p].stages;
    for (size_t s = 0; s < stages.size(); ++s) {
      const int tp = stages[s].tp();
      check_divides(tp, c.num_attention_heads, "num_attention_heads", p, s, st);
      check_divides(tp, c.num_key_value_heads, "num_key_value_heads", p, s, st);
      check_divides(tp, c.hidden_size, "hidden_size", p, s, st);
      check_divides(tp, c.intermediate_size, "intermediate_size", p, s, st);
      if (s == 0 || s + 1 == stages.size()) check_divides(tp, c.vocab_size, "vocab_size", p, s, st);
    }
  }
}

Annotation llama_param_annotation(const LlamaParam& param, const Strategy& st) {
  std::vector<DeviceGroup> groups;
  std::vector<DistState> states;
  for (size_t p = 0; p < st.pipelines.size(); ++p) {
    const sharding::StageSpec& stage = stage_for(st, p, param);
    groups.emplace_back(stage.ranks);
    states.push_back(param_ds(param.role, stage.tp(), st.zero1));
  }
  return Annotation::make(std::move(groups), std::move(states), kDuplicate);
}

sharding::AnnotationPlan compile_llama_plan(const LlamaConfig& config, const Strategy& st) {
  validate_llama_strategy(config, st);
  sharding::AnnotationPlan plan;
  for (const LlamaParam& param : llama_parameters(config)) {
    Annotation a = llama_param_annotation(param, st);
    a.validate_for(param.shape, param.name);
    plan.set(param.name, a);
    if (st.zero1) plan.set_optimizer_state(param.name, a.optimizer_state(param.shape));
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
  std::vector<DeviceGroup> pipeline_groups;
  std::vector<DistState> pipeline_states;
  for (const auto& pipe : st.pipelines) {
    std::vector<int> ranks;
    for (const auto& stage : pipe.stages) ranks.insert(ranks.end(), stage.ranks.begin(), stage.ranks.end());
    pipeline_states.push_back(DistState::dup(static_cast<int>(ranks.size())));
    pipeline_groups.emplace_back(std::move(ranks));
  }
  const Annotation whole_pipelines = Annotation::make(pipeline_groups, pipeline_states, 0);

  plan.set("input_ids", activation(first));
  plan.set("positions", whole_pipelines);
  plan.set("cu_seqlens", whole_pipelines);
  plan.set("targets", activation(last));
  plan.set("loss_scale", activation(last).with_hdim(kDuplicate));  // one scalar, the same everywhere
  plan.set("model.embed_out", activation(first));                   // vocab-parallel partial sum -> all-reduce
  const int L = static_cast<int>(config.num_hidden_layers);
  for (int l = 0; l < L; ++l) {
    const Annotation here = activation(of_layer(l));
    const std::vector<std::string> names = llama_layer_reshard_names(l);
    for (const std::string& name : names) plan.set(name, here);
    // The layer's output goes to the stage of the next consumer: the next layer, or the final norm.
    plan.set(names.back(), l + 1 < L ? activation(of_layer(l + 1)) : activation(last));
  }
  // The logits stay vocab-parallel: the loss normalizes each row across the TP ranks itself.
  plan.set("lm_head_out", on_stages(last, [](int tp) { return DistState::split(1, tp); }, 0));
  if (config.tie_word_embeddings) {  // the table, vocab-parallel on each last stage
    plan.set("lm_head.tied_weight", on_stages(last, [](int tp) { return DistState::split(0, tp); }, kDuplicate));
    // Its gradient goes home to the first stage in the layout of the lookup's own gradient (the whole
    // table on every TP rank; a partial sum over the pipelines' data), so the two add up there.
    const int hdim = st.pipelines.size() > 1 ? sharding::kPartial : kDuplicate;
    plan.set("lm_head.tied_weight.bwd", on_stages(first, [](int tp) { return DistState::dup(tp); }, hdim));
  }
  for (const auto& pipe : st.pipelines) plan.pipelines.push_back({pipe.micro_batch_size, pipe.num_micro_batches});
  plan.recompute = st.recompute;
  return plan;
}

}  // namespace hspmd::models
