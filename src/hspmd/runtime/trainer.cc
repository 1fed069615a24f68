#include "hspmd/runtime/trainer.h"

#include <algorithm>
#include <string>

#include "hspmd/core/error.h"
#include "hspmd/switching/state_parts.h"

namespace hspmd::runtime {

sharding::Strategy single_rank_strategy(const models::Model& model, const TrainerOptions& options) {
  // The micro-batch size only sizes the memory estimate: the one pipeline takes the whole batch.
  const int64_t rows = (options.global_batch_tokens + options.seq_len - 1) / std::max<int64_t>(options.seq_len, 1);
  sharding::Strategy st;
  st.name = "single-process";
  st.recompute = options.recompute;
  st.pipelines.push_back({.micro_batch_size = static_cast<int>(std::max<int64_t>(rows, 1)),
                          .num_micro_batches = 1,
                          .stages = {{.ranks = {0}, .first_layer = 0, .last_layer = model.num_layers() - 1}}});
  return st;
}

Trainer::Trainer(std::shared_ptr<const models::Model> model, const data::TokenDataset& dataset, TrainerOptions options)
    : options_(options), groups_(std::make_unique<comm::GroupCache>(nullptr, 0, nullptr)) {
  DistOptions o;
  o.train = options_;
  o.plan_name = "single-process";
  const sharding::AnnotationPlan plan = model->compile_plan(single_rank_strategy(*model, options_));
  trainer_ = std::make_unique<DistTrainer>(std::move(model), dataset, plan, o, 0, 1, *groups_);
}

Trainer::~Trainer() = default;

graph::TensorMap Trainer::parameters() const {
  graph::TensorMap out;
  for (const SavedShard& s : trainer_->parameter_shards()) out.emplace(s.name, s.data);
  return out;
}

Checkpoint Trainer::checkpoint() const {
  Checkpoint c;
  for (const SavedShard& s : trainer_->state_shards()) {
    const switching::StateTensorName n = switching::parse_state_tensor_name(s.name);
    switch (n.part) {
      case switching::StatePart::kValue:
        c.model.emplace(n.param, s.data);
        break;
      case switching::StatePart::kExpAvg:
        c.exp_avg.emplace(n.param, s.data);
        break;
      case switching::StatePart::kExpAvgSq:
        c.exp_avg_sq.emplace(n.param, s.data);
        break;
    }
  }
  c.state.step = step_count();
  c.state.seed = options_.seed;
  c.state.loader = trainer_->loader_state();
  c.state.config = trainer_->model().config_json();
  c.state.options = options_.to_json();
  return c;
}

}  // namespace hspmd::runtime
