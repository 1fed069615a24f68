#include "hspmd/runtime/plan_cache.h"

#include <algorithm>
#include <set>
#include <utility>

#include "hspmd/core/error.h"
#include "hspmd/graph/op_registry.h"
#include "hspmd/graph/token_loss.h"
#include "hspmd/runtime/gradient_sync.h"
#include "hspmd/specialize/reshard_resolution.h"

namespace hspmd::runtime {

using graph::OpKind;
using graph::TensorRef;

namespace {

// (channel, group): what a step connects on, sorted so every rank connects in the same order.
using ChannelGroups = std::set<std::pair<std::string, std::vector<int>>>;

// The groups and pairs of every op of a resolution, for every device, on `channel`.
void add_resolution_groups(const resolve::Resolution& r, const std::string& channel, ChannelGroups& out) {
  for (const resolve::ResolveStep& step : r.steps) {
    for (const auto& [device, ops] : step.ops) {
      for (const resolve::CommOp& op : ops) {
        if (!op.group.empty()) out.emplace(channel, comm::canonical_group(op.group));
        if (op.peer >= 0) out.emplace(channel, comm::canonical_group({device, op.peer}));
      }
    }
  }
}

}  // namespace

PlanCache::PlanCache(const models::ModelGraph& model, int rank, PlanCacheOptions options, CommSession& session,
                     resolve::ResolveCache& resolutions)
    : model_(model), rank_(rank), options_(std::move(options)), session_(session), resolutions_(resolutions) {}

sharding::AnnotationPlan PlanCache::effective(const sharding::AnnotationPlan& plan) const {
  sharding::AnnotationPlan effective = plan;
  effective.recompute = plan.recompute || options_.recompute;  // the strategy's or the command line's
  return effective;
}

SpecializedPlan* PlanCache::find(const sharding::AnnotationPlan& effective) {
  auto it = plans_.find(effective.to_json_text());
  return it == plans_.end() ? nullptr : it->second.get();
}

SpecializedPlan& PlanCache::keep(std::unique_ptr<SpecializedPlan> p, const std::vector<int>& members) {
  connect(*p, members);
  const std::string key = p->exec->plan().to_json_text();
  return *plans_.emplace(key, std::move(p)).first->second;
}

SpecializedPlan& PlanCache::find_or_build(const sharding::AnnotationPlan& plan, const std::string& name,
                                          const std::vector<int>& members) {
  const sharding::AnnotationPlan e = effective(plan);
  if (SpecializedPlan* known = find(e)) {
    connect(*known, members);
    return *known;
  }
  return keep(specialize(e, name), members);
}

std::unique_ptr<SpecializedPlan> PlanCache::specialize(const sharding::AnnotationPlan& plan,
                                                       const std::string& name) const {
  HSPMD_CHECK(!plan.pipelines.empty()) << "plan " << name << " names no pipelines (micro-batch sizes and counts)";
  auto p = std::make_unique<SpecializedPlan>();
  p->name = name;
  p->exec = std::make_unique<specialize::ExecGraph>(model_.graph, plan, rank_);
  const specialize::ExecGraph& exec = *p->exec;
  HSPMD_CHECK(exec.data_group() < static_cast<int>(plan.pipelines.size()))
      << "plan " << name << ": rank " << rank_ << " is fed data group " << exec.data_group() << " but the plan lists "
      << plan.pipelines.size() << " pipelines";
  p->active = exec.data_group() >= 0;
  std::vector<std::pair<std::string, Shape>> shapes;
  for (size_t i = 0; i < model_.params.size(); ++i) {
    shapes.emplace_back(model_.param_names[i], hspmd::evaluate(model_.graph.info(model_.params[i]).shape, {}));
  }
  p->param_layouts = switching::param_layouts(exec.plan(), shapes);
  const std::vector<graph::GradientSync> syncs =
      graph::gradient_syncs(model_.graph, exec.deduced(), exec.plan(), model_.params, model_.grads);
  for (size_t i = 0; i < model_.params.size(); ++i) {
    const switching::ParamLayout& layout = p->param_layouts[i];
    HSPMD_CHECK(i < syncs.size() && syncs[i].param == layout.name) << "gradient of '" << layout.name << "' is missing";
    HSPMD_ASSERT(syncs[i].target == layout.state) << "'" << layout.name << "': the gradient sync's "
                                                  << "target is not the optimizer-state layout";
    p->grad_annotations.push_back(syncs[i].deduced);
    const bool holds = exec.holds(model_.params[i]);
    HSPMD_CHECK(p->active || !holds) << "plan " << name << ": rank " << rank_ << " holds '" << layout.name
                                     << "' but is fed no data (is it in a pipeline of the strategy?)";
    HSPMD_CHECK(!holds || layout.state.region(rank_, shapes[i].second).has_value())
        << "plan " << name << ": rank " << rank_ << " holds '" << layout.name << "' but no optimizer state of it";
  }
  p->pipelines = specialize::build_pipeline_layout(model_.graph, exec.deduced());
  if (p->active) {
    p->forward_releases = exec.forward_releases(model_.loss);
    p->backward_releases = exec.backward_releases(model_.grads);
    const sharding::PipelineSchedule& mb = plan.pipelines[exec.data_group()];
    if (plan.shard_parameters) {
      p->forward_gathers = specialize::forward_gather_units(exec);
      p->backward_gathers = specialize::backward_gather_units(exec, model_.params, model_.grads);
      for (const switching::ParamLayout& layout : p->param_layouts) {
        specialize::check_passes_in_lockstep(p->pipelines, options_.schedule, mb.num_micro_batches, layout.name,
                                             layout.read.devices());
      }
    }
    const auto [pipeline, stage] = p->pipelines.locate(rank_);
    const int num_stages = static_cast<int>(p->pipelines.pipelines[pipeline].stages.size());
    p->schedule = specialize::make_schedule(options_.schedule, mb.num_micro_batches, num_stages, stage);
    const int64_t tokens = mb.micro_batch_size * mb.row_tokens(options_.seq_len);  // rows padded under CP or SP
    p->memory = specialize::estimate_memory(exec, {.micro_batch_tokens = tokens,
                                                   .micro_batches_in_flight = specialize::max_in_flight(p->schedule),
                                                   .gradients_reduced_on_a_thread = options_.gradients_reduced_on_a_thread});
    HSPMD_CHECK(options_.device.memory_bytes == 0 || p->memory.total() <= options_.device.memory_bytes)
        << "plan " << name << ": rank " << rank_ << " ("
        << (options_.device.name.empty() ? "device" : options_.device.name) << ") needs about "
        << p->memory.to_string() << ", more than the device's capacity of " << options_.device.memory_bytes
        << " bytes; give this rank fewer layers, a higher TP degree or smaller micro-batches";
  }
  return p;
}

void PlanCache::connect(const SpecializedPlan& p, const std::vector<int>& members) {
  // Every group a step of the plan communicates on, for all ranks alike, from the same resolutions
  // the steps run (the cache keeps them): each Reshard of F ("F") and B ("B") with every pipeline's
  // micro-batch shapes, the vocab-parallel loss's statistics gathers ("F"), the gradient syncs
  // and ZeRO-3's per-layer parameter gathers ("grad"), ZeRO-1/2's parameter gathers and the all-rank
  // reduction ("post").
  const sharding::AnnotationPlan& plan = p.exec->plan();
  std::vector<SymBinding> bindings;
  for (const sharding::PipelineSchedule& mb : plan.pipelines) {
    bindings.push_back({{"T", mb.micro_batch_size * mb.row_tokens(options_.seq_len)}, {"N", mb.micro_batch_size}});
  }
  ChannelGroups groups{{"post", members}};
  for (int id = 0; id < model_.graph.num_ops(); ++id) {
    const graph::Op& op = model_.graph.op(id);
    const auto logits = graph::gathers_vocab_shards(op.kind)
                            ? graph::loss_logits(model_.graph, op, [&](TensorRef t) { return p.exec->annotation(t); })
                            : std::nullopt;
    if (logits) {
      for (int d : logits->annotation.devices()) {
        const std::vector<int> shards = specialize::vocab_shard_ranks(logits->annotation, d);
        if (!shards.empty()) groups.emplace("F", comm::canonical_group(shards));
      }
    }
    if (op.kind != OpKind::kReshard) continue;
    const TensorRef in = op.inputs[0], out{id, 0};
    for (const specialize::GroupResolution& g :
         specialize::resolve_reshard(p.exec->annotation(in), p.exec->annotation(out), model_.graph.info(out).shape,
                                     bindings, op.name, resolutions_)) {
      add_resolution_groups(*g.resolution, op.backward ? "B" : "F", groups);
    }
  }
  for (size_t i = 0; i < p.param_layouts.size(); ++i) {
    const switching::ParamLayout& l = p.param_layouts[i];
    add_resolution_groups(resolutions_.resolve(p.grad_annotations[i], l.state, l.shape, l.name + ".grad"),
                          kGradientChannel, groups);
    // ZeRO-1/2's gather after the update ("post"), ZeRO-3's per layer in F and B on the gradient
    // sync's thread: state -> what the passes read.
    if (l.state != l.read) {
      add_resolution_groups(resolutions_.resolve(l.state, l.read, l.shape, l.name),
                            plan.shard_parameters ? kGradientChannel : "post", groups);
    }
  }
  // Connecting is collective per group: walking one sorted list everywhere means the first group
  // anyone waits on has all its members there, so no order of arrival can deadlock, and a peer
  // that cannot be reached fails the run here rather than in the middle of a step.
  for (const auto& [channel, ranks] : groups) {
    if (std::find(ranks.begin(), ranks.end(), rank_) != ranks.end()) session_.group(ranks, channel);
  }
}

}  // namespace hspmd::runtime
