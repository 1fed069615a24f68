#include "hspmd/runtime/dist_trainer.h"

#include <optional>

#include "hspmd/core/error.h"
#include "hspmd/kernels/slice.h"
#include "hspmd/runtime/fault_injection.h"

// DistTrainer (runtime/dist_trainer.h): checkpoints and weights.
namespace hspmd::runtime {

using sharding::Region;
using switching::StatePart;

void DistTrainer::save(const std::string& dir) {
  auto world = all_ranks_group();
  const bool lead = rank_ == members_.front();  // rank 0 may have died (elastic training)
  if (lead) prepare_sharded_save(dir);
  world->barrier().wait();
  write_rank_shards(dir, rank_, state_.shards(rank_, /*with_moments=*/true));
  fault_point(rank_, step_, "save");
  world->barrier().wait();
  if (lead) {
    nlohmann::json state = {{"step", step_},
                            {"seed", options_.train.seed},
                            {"loader", nlohmann::json::parse(loader_state().to_json())},
                            {"config", model_->config_json()},
                            {"options", options_.train.to_json()}};
    finish_sharded_save(dir, world_size_, state);
  }
  world->barrier().wait();
}

void DistTrainer::restore_from(const StateReader& read, const TrainerOptions& saved, uint64_t saved_seed, int64_t step,
                               const data::LoaderState& loader, const std::string& source) {
  const TrainerOptions& o = options_.train;
  HSPMD_CHECK(saved.seq_len == o.seq_len && saved.global_batch_tokens == o.global_batch_tokens && saved_seed == o.seed)
      << "cannot resume from " << source << ": its data stream was seq_len " << saved.seq_len
      << ", global_batch_tokens " << saved.global_batch_tokens << ", seed " << saved_seed << "; this run asks for "
      << o.seq_len << ", " << o.global_batch_tokens << ", " << o.seed;
  state_.read(read);
  step_ = step;
  reset_loader(loader);
}

void DistTrainer::restore(const std::string& dir) {
  const ShardedCheckpoint c = ShardedCheckpoint::open(dir);
  const nlohmann::json& state = c.state();
  check_same_config(state.at("config"), *model_, dir);
  restore_from([&](const std::string& name, const Shape&, const Region& region) { return c.read(name, region); },
               TrainerOptions::from_json(state.at("options")), state.at("seed").get<uint64_t>(),
               state.at("step").get<int64_t>(), data::LoaderState::from_json(state.at("loader").dump()), dir);
}

namespace {

// The region of a whole tensor from `tensors` (by name); Error naming it when absent or mis-shaped.
Tensor region_of(const graph::TensorMap& tensors, const std::string& name, const Shape& shape, const Region& region,
                 const std::string& source) {
  auto it = tensors.find(name);
  HSPMD_CHECK(it != tensors.end()) << source << " has no tensor '" << name << "'";
  HSPMD_CHECK(it->second.shape() == shape && it->second.dtype() == DType::kFloat32)
      << source << ": tensor '" << name << "' is " << it->second.to_string() << ", the model has float32 "
      << shape.to_string();
  return copy_out(it->second, Region::full(shape), region, nullptr);
}

}  // namespace

void DistTrainer::restore(const Checkpoint& c) {
  check_same_config(c.state.config, *model_, "the checkpoint");
  auto read = [&](const std::string& name, const Shape& shape, const Region& region) {
    const switching::StateTensorName n = switching::parse_state_tensor_name(name);
    switch (n.part) {
      case StatePart::kValue:
        break;
      case StatePart::kExpAvg:
        return region_of(c.exp_avg, n.param, shape, region, "the checkpoint's moments");
      case StatePart::kExpAvgSq:
        return region_of(c.exp_avg_sq, n.param, shape, region, "the checkpoint's moments");
    }
    return region_of(c.model, name, shape, region, "the checkpoint");
  };
  restore_from(read, TrainerOptions::from_json(c.state.options), c.state.seed, c.state.step, c.state.loader,
               "the checkpoint");
}

void DistTrainer::load_weights(const graph::TensorMap& weights) {
  for (TensorState& s : state_.tensors) s.value.copy_from(region_of(weights, s.name, s.shape, s.region, "the weights"));
}

void DistTrainer::load_weights(const HfWeights& weights) {
  for (TensorState& s : state_.tensors) s.value.copy_from(weights.read(s.name, s.region));
}

Tensor DistTrainer::gather_state_tensor(const std::string& name) {
  const switching::StateTensorName n = switching::parse_state_tensor_name(name);
  std::optional<Shape> shape;
  for (const models::ParamSpec& p : model_->parameters()) {
    if (p.name == n.param) shape = p.shape;
  }
  HSPMD_CHECK(shape.has_value()) << "no tensor named '" << name << "' in model " << model_->model_type()
                               << " (parameters by Hugging Face name, moments as <name>.exp_avg / <name>.exp_avg_sq)";
  Tensor whole = Tensor::zeros(*shape, DType::kFloat32, allocator_.get());
  for (const SavedShard& s : state_.shards(rank_, n.part != StatePart::kValue)) {
    if (s.name != name) continue;
    kernels::copy_region(s.data, std::vector<int64_t>(s.region.begin.size(), 0), whole, s.region.begin,
                         s.region.shape().dims());
  }
  all_ranks_group()->allreduce({.data = comm::CommBuffer::of(whole)}).wait();
  return whole;
}

}  // namespace hspmd::runtime
