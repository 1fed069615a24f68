#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/runtime/dist_trainer_parts.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <set>
#include <sstream>

#include "hspmd/core/error.h"
#include "hspmd/data/context_parallel.h"
#include "hspmd/data/packing.h"
#include "hspmd/graph/init.h"
#include "hspmd/graph/run_kernel.h"
#include "hspmd/graph/token_loss.h"
#include "hspmd/kernels/adamw.h"
#include "hspmd/kernels/elementwise.h"
#include "hspmd/kernels/reduce.h"
#include "hspmd/kernels/slice.h"
#include "hspmd/kernels/threading.h"
#include "hspmd/runtime/fault_injection.h"
#include "hspmd/specialize/reshard_resolution.h"
#include "hspmd/switching/switch_plan.h"

namespace hspmd::runtime {

using graph::OpKind;
using graph::TensorRef;
using sharding::Annotation;
using sharding::Region;
using namespace dist_detail;

namespace dist_detail {

// Where `inner` (global coordinates) starts inside `outer`.
std::vector<int64_t> offsets_in(const Region& outer, const Region& inner) {
  std::vector<int64_t> starts(inner.begin.size());
  for (size_t d = 0; d < starts.size(); ++d) starts[d] = inner.begin[d] - outer.begin[d];
  return starts;
}

// Copies `inner` (global coordinates, inside `outer`) out of `t`, which holds `outer`.
Tensor copy_out(const Tensor& t, const Region& outer, const Region& inner, Allocator* allocator) {
  Tensor out = Tensor::empty(inner.shape(), t.dtype(), allocator);
  kernels::copy_region(t, offsets_in(outer, inner), out, std::vector<int64_t>(inner.begin.size(), 0),
                       inner.shape().dims());
  return out;
}

// True when `device` counts its shard of `a` in sums over all ranks (norms) and saves it in
// checkpoints, so every element is taken exactly once: of a tensor duplicated across subgroups
// only subgroup 0 counts; inside a subgroup, the first device holding each region.
bool counts_once(const Annotation& a, const Shape& shape, int device) {
  const auto where = a.locate(device);
  if (!where) return false;
  const auto [g, i] = *where;
  if (a.hdim() == sharding::kDuplicate && g != 0) return false;
  const Region part = a.group_part(g, shape);
  const Region mine = a.ds(g).region(i, part);
  for (int j = 0; j < i; ++j) {
    if (a.ds(g).region(j, part) == mine) return false;
  }
  return true;
}

}  // namespace dist_detail

namespace {

// Elements of `region` of parameter `name` (global shape `shape`), generated row by row from the
// global element index, so every strategy starts from the single-process weights (architecture §9).
Tensor init_region(const std::string& name, const Shape& shape, const Region& region, const graph::InitSpec& spec,
                   uint64_t seed, Allocator* allocator) {
  Tensor out = Tensor::empty(region.shape(), DType::kFloat32, allocator);
  const int rank = shape.rank();
  if (rank == 0 || region.numel() == 0) {
    if (region.numel() > 0) out.copy_from(graph::init_tensor(name, shape, DType::kFloat32, spec, seed));
    return out;
  }
  const int64_t row = region.extent(rank - 1);
  std::vector<int64_t> index = region.begin;  // the first element of the current row
  float* dst = out.data<float>();
  for (int64_t written = 0; written < region.numel(); written += row) {
    int64_t offset = 0;
    for (int d = 0; d < rank; ++d) offset = offset * shape[d] + index[d];
    Tensor part = graph::init_tensor(name, Shape{row}, DType::kFloat32, spec, seed, static_cast<uint64_t>(offset));
    std::copy(part.data<float>(), part.data<float>() + row, dst + written);
    for (int d = rank - 2; d >= 0; --d) {  // next row: odometer over the leading dims
      if (++index[d] < region.end[d]) break;
      index[d] = region.begin[d];
    }
  }
  return out;
}

std::vector<int> all_ranks(int world) {
  std::vector<int> r(world);
  std::iota(r.begin(), r.end(), 0);
  return r;
}

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

DistTrainer::DistTrainer(const models::LlamaConfig& config, const data::TokenDataset& dataset,
                         const sharding::AnnotationPlan& plan, DistOptions options, int rank, int world_size,
                         comm::GroupCache& groups)
    : options_(std::move(options)),
      model_(models::build_llama(config,
                                 {.precision = options_.train.precision, .fused_head_loss = options_.fused_head_loss})),
      dataset_(&dataset),
      rank_(rank),
      world_size_(world_size),
      allocator_(std::make_unique<Allocator>(
          Allocator::Options{.capacity_bytes = static_cast<size_t>(options_.device.memory_bytes),
                             .name = std::string("rank ").append(std::to_string(rank))})),
      session_(groups, rank, allocator_.get()),
      lr_schedule_(optimizer_options(options_.train).schedule),
      pacer_(options_.device.speed),
      tracer_(rank, options_.trace) {
  const TrainerOptions& o = options_.train;
  members_ = options_.members.empty() ? all_ranks(world_size_) : options_.members;
  check_dataset_fits(dataset, config);
  validate_options(o, config);
  if (o.threads > 0) kernels::set_num_threads(o.threads);
  current_ = &keep_plan(specialize_plan(effective_plan(plan), options_.plan_name));
  params_ = param_states(*current_);
  for (ParamState& s : params_) {
    const TensorRef ref = model_.params[s.index];
    s.value = init_region(s.name, s.shape, s.region, model_.graph.op(ref.op).attrs.init, o.seed, allocator_.get());
    s.exp_avg = Tensor::zeros(s.state_region.shape(), DType::kFloat32, allocator_.get());
    s.exp_avg_sq = Tensor::zeros(s.state_region.shape(), DType::kFloat32, allocator_.get());
  }
  loader_ = std::make_unique<data::Loader>(
      dataset, data::LoaderOptions{.seq_len = o.seq_len, .global_batch_tokens = o.global_batch_tokens, .seed = o.seed});
}

sharding::AnnotationPlan DistTrainer::effective_plan(const sharding::AnnotationPlan& plan) const {
  sharding::AnnotationPlan effective = plan;
  effective.recompute = plan.recompute || options_.train.recompute;  // the strategy's or the command line's
  return effective;
}

DistTrainer::PlanRuntime* DistTrainer::find_plan(const sharding::AnnotationPlan& effective) {
  auto it = plans_.find(effective.to_json_text());
  return it == plans_.end() ? nullptr : it->second.get();
}

DistTrainer::PlanRuntime& DistTrainer::keep_plan(std::unique_ptr<PlanRuntime> p) {
  connect(*p);
  const std::string key = p->exec->plan().to_json_text();
  return *plans_.emplace(key, std::move(p)).first->second;
}

std::unique_ptr<DistTrainer::PlanRuntime> DistTrainer::specialize_plan(const sharding::AnnotationPlan& plan,
                                                                       const std::string& name) const {
  HSPMD_CHECK(!plan.pipelines.empty()) << "plan " << name << " names no pipelines (micro-batch sizes and counts)";
  auto p = std::make_unique<PlanRuntime>();
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
  p->layouts = switching::param_layouts(exec.plan(), shapes);
  const std::vector<graph::GradientSync> syncs =
      graph::gradient_syncs(model_.graph, exec.deduced(), exec.plan(), model_.params, model_.grads);
  for (size_t i = 0; i < model_.params.size(); ++i) {
    HSPMD_CHECK(i < syncs.size() && syncs[i].param == p->layouts[i].name)
        << "gradient of '" << p->layouts[i].name << "' is missing";
    HSPMD_ASSERT(syncs[i].target == p->layouts[i].state) << "'" << p->layouts[i].name << "': the gradient sync's "
                                                         << "target is not the optimizer-state layout";
    p->grad_annotations.push_back(syncs[i].deduced);
    const bool holds = exec.holds(model_.params[i]);
    HSPMD_CHECK(p->active || !holds) << "plan " << name << ": rank " << rank_ << " holds '" << p->layouts[i].name
                                     << "' but is fed no data (is it in a pipeline of the strategy?)";
    HSPMD_CHECK(!holds || p->layouts[i].state.region(rank_, shapes[i].second).has_value())
        << "plan " << name << ": rank " << rank_ << " holds '" << p->layouts[i].name << "' but no optimizer state of it";
  }
  p->layout = specialize::build_pipeline_layout(model_.graph, exec.deduced());
  if (p->active) {
    p->forward_releases = exec.forward_releases(model_.loss);
    p->backward_releases = exec.backward_releases(model_.grads);
    const auto [pipeline, stage] = p->layout.locate(rank_);
    const int num_stages = static_cast<int>(p->layout.pipelines[pipeline].stages.size());
    const sharding::PipelineSchedule& mb = plan.pipelines[exec.data_group()];
    p->schedule = specialize::make_schedule(options_.schedule, mb.num_micro_batches, num_stages, stage);
    p->memory = specialize::estimate_memory(exec, {.micro_batch_tokens = mb.micro_batch_size * options_.train.seq_len,
                                                   .micro_batches_in_flight = specialize::max_in_flight(p->schedule)});
    HSPMD_CHECK(options_.device.memory_bytes == 0 || p->memory.total() <= options_.device.memory_bytes)
        << "plan " << name << ": rank " << rank_ << " ("
        << (options_.device.name.empty() ? "device" : options_.device.name) << ") needs about "
        << p->memory.to_string() << ", more than the device's capacity of " << options_.device.memory_bytes
        << " bytes; give this rank fewer layers, a higher TP degree or smaller micro-batches";
  }
  return p;
}

std::vector<DistTrainer::ParamState> DistTrainer::param_states(const PlanRuntime& p) const {
  const graph::OptimizerOptions opt = optimizer_options(options_.train);
  std::vector<ParamState> out;
  for (size_t i = 0; i < model_.params.size(); ++i) {
    if (!p.exec->holds(model_.params[i])) continue;
    const switching::ParamLayout& l = p.layouts[i];
    ParamState s;
    s.index = static_cast<int>(i);
    s.name = l.name;
    s.shape = l.shape;
    s.annotation = l.value;
    s.grad_annotation = p.grad_annotations[i];
    s.state_annotation = l.state;
    s.region = *l.value.region(rank_, l.shape);
    s.state_region = *l.state.region(rank_, l.shape);
    s.decay = s.shape.rank() >= 2 || opt.decay_vectors;
    out.push_back(std::move(s));
  }
  return out;
}

void DistTrainer::connect(const PlanRuntime& p) {
  // Every group a step of the plan communicates on, for all ranks alike, from the same resolutions
  // the steps run (the cache keeps them): each Reshard of F ("F") and B ("B") with every pipeline's
  // micro-batch shapes, the vocab-parallel loss's statistics gathers ("F"), the gradient syncs,
  // ZeRO-1 parameter gathers and the all-rank reduction ("post").
  const sharding::AnnotationPlan& plan = p.exec->plan();
  std::vector<SymBinding> bindings;
  for (const sharding::PipelineSchedule& mb : plan.pipelines) {
    bindings.push_back({{"T", mb.micro_batch_size * options_.train.seq_len}, {"N", mb.micro_batch_size}});
  }
  ChannelGroups groups{{"post", members_}};
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
                                     bindings, op.name, cache_)) {
      add_resolution_groups(*g.resolution, op.backward ? "B" : "F", groups);
    }
  }
  for (size_t i = 0; i < p.layouts.size(); ++i) {
    const switching::ParamLayout& l = p.layouts[i];
    add_resolution_groups(cache_.resolve(p.grad_annotations[i], l.state, l.shape, l.name + ".grad"), "post", groups);
    if (l.state != l.value) add_resolution_groups(cache_.resolve(l.state, l.value, l.shape, l.name), "post", groups);
  }
  // Connecting is collective per group: walking one sorted list everywhere means the first group
  // anyone waits on has all its members there, so no order of arrival can deadlock, and a peer
  // that cannot be reached fails the run here rather than in the middle of a step.
  for (const auto& [channel, ranks] : groups) {
    if (std::find(ranks.begin(), ranks.end(), rank_) != ranks.end()) session_.group(ranks, channel);
  }
}

std::shared_ptr<comm::Communicator> DistTrainer::all_ranks_group() {
  return session_.group(members_, "post");
}

DistTrainer::~DistTrainer() = default;

const specialize::ExecGraph& DistTrainer::exec_graph() const { return *current_->exec; }
const std::vector<specialize::Task>& DistTrainer::schedule() const { return current_->schedule; }
const specialize::PipelineLayout& DistTrainer::pipelines() const { return current_->layout; }
const std::string& DistTrainer::plan_name() const { return current_->name; }
bool DistTrainer::active() const { return current_->active; }

std::string DistTrainer::describe() const {
  const PlanRuntime& p = *current_;
  std::ostringstream out;
  if (!p.active) {
    out << "rank " << rank_ << ": spare under plan " << p.name << " (holds no state; joins the loss reduction only)";
    return out.str();
  }
  const auto [pipeline, stage] = p.layout.locate(rank_);
  const auto& stages = p.layout.pipelines[pipeline].stages;
  const sharding::PipelineSchedule& mb = p.exec->plan().pipelines[p.exec->data_group()];
  out << "rank " << rank_ << ": pipeline " << pipeline << ", stage " << stage + 1 << "/" << stages.size() << " "
      << sharding::DeviceGroup(stages[stage]).to_string() << ", " << mb.num_micro_batches << " micro-batches of "
      << mb.micro_batch_size << ", " << specialize::schedule_kind_name(options_.schedule) << ": "
      << specialize::to_string(p.schedule) << (p.exec->plan().recompute ? ", recomputing each layer in B" : "")
      << "; memory estimate " << p.memory.to_string();
  return out.str();
}

void DistTrainer::pace() { pacer_.pad(); }

Tensor DistTrainer::run_reshard(int id, const Tensor& src, const SymBinding& binding, const std::string& channel) {
  const graph::Op& op = current_->exec->op(id);
  const TensorRef in = op.inputs[0], out{id, 0};
  const SymShape& shape = model_.graph.info(out).shape;
  std::vector<specialize::GroupResolution> all =
      specialize::resolve_reshard(current_->exec->annotation(in), current_->exec->annotation(out), shape, {binding}, op.name, cache_);
  const specialize::GroupResolution* mine = specialize::resolution_of(all, rank_);
  if (mine == nullptr) return Tensor();
  // A whole-tensor resolution was computed from this rank's symbols alone: only sound when the
  // shape has none (another pipeline may bind them differently).
  HSPMD_CHECK(mine->group >= 0 || is_static(shape))
      << "Reshard '" << op.name << "' changes the top tier of an activation (" << current_->exec->annotation(in).to_string()
      << " -> " << current_->exec->annotation(out).to_string()
      << "); pipelines with their own micro-batch shapes cannot do that";
  return execute_reshard(*mine->resolution, mine->shape, rank_, src, session_, channel, model_.graph.info(out).dtype);
}

std::string DistTrainer::where(const std::string& op) const {
  std::string s = "rank ";
  return s.append(std::to_string(rank_)).append(", op '").append(op).append("': ");
}

void DistTrainer::run_op(int id, MicroBatch& mb) {
  const graph::Op& op = current_->exec->op(id);
  std::vector<Tensor>& outs = mb.values[id];
  if (op.kind == OpKind::kReshard) {
    pace();
    const TensorRef in = op.inputs[0];
    const Tensor src = current_->exec->holds(in) ? mb.values[in.op][in.index] : Tensor();
    const double start = tracer_.now_us();
    Tensor out = run_reshard(id, src, mb.binding, op.backward ? "B" : "F");
    tracer_.record(op.name, "comm", start, tracer_.now_us());
    outs = {out};
    return;
  }
  // After a peer's death (elastic training aborts the groups) this step is lost: stop computing
  // it now rather than at the next communication, which on a large model is seconds away.
  if (std::string why = session_.groups().aborted(); !why.empty()) {
    throw Error(where(op.name) + "step abandoned: communication was aborted (" + why + ")");
  }
  pacer_.begin();
  std::vector<Tensor> inputs;
  for (TensorRef in : op.inputs) {
    HSPMD_ASSERT(mb.values[in.op].size() > static_cast<size_t>(in.index) && mb.values[in.op][in.index].defined())
        << "rank " << rank_ << ", op '" << op.name << "': input '" << model_.graph.tensor_name(in) << "' is not here";
    inputs.push_back(mb.values[in.op][in.index]);
  }
  std::vector<Shape> shapes;
  for (int i = 0; i < static_cast<int>(op.outputs.size()); ++i)
    shapes.push_back(current_->exec->local_shape({id, i}, mb.binding));
  graph::KernelContext ctx{op, inputs, shapes, allocator_.get(), {}, {}};
  const std::vector<int>& vocab_shards = current_->exec->vocab_shard_ranks(id);
  if (graph::gathers_vocab_shards(op.kind) && !vocab_shards.empty()) {
    // Vocab-parallel loss: the shards' row statistics meet in one all-gather (graph/ops/cross_entropy.cc).
    ctx.gather_vocab_shards = [&](const Tensor& mine) {
      pacer_.end();
      pace();
      const double begin = tracer_.now_us();
      Tensor all = Tensor::empty(Shape{static_cast<int64_t>(vocab_shards.size()), mine.numel()}, mine.dtype(),
                                 allocator_.get());
      session_.group(vocab_shards, "F")
          ->allgather({.input = comm::CommBuffer::of(mine), .output = comm::CommBuffer::of(all)})
          .wait();
      tracer_.record(op.name + ".vocab_gather", "comm", begin, tracer_.now_us());
      pacer_.begin();
      return all;
    };
  }
  graph::run_kernel(ctx, {.rank = rank_});
  outs = std::move(ctx.outputs);
  pacer_.end();
}

void DistTrainer::forward(MicroBatch& mb) {
  fault_point(rank_, step_ + 1, "forward");
  const double start = tracer_.now_us();
  mb.values.assign(model_.graph.num_ops(), {});
  for (int id : current_->exec->placeholders()) mb.values[id] = {mb.feeds.at(model_.graph.op(id).name)};
  for (const ParamState& s : params_) mb.values[model_.params[s.index].op] = {s.value};
  const std::vector<int>& ops = current_->exec->forward_ops();
  for (size_t k = 0; k < ops.size(); ++k) {
    run_op(ops[k], mb);
    for (TensorRef t : current_->forward_releases[k]) mb.values[t.op][t.index] = Tensor();  // B keeps what it reads
  }
  pace();
  if (current_->exec->holds(model_.loss)) mb.loss = mb.values[model_.loss.op][model_.loss.index].element_as_double(0);
  tracer_.record(std::string("F").append(std::to_string(mb.index)), "compute", start, tracer_.now_us());
}

void DistTrainer::backward(MicroBatch& mb) {
  fault_point(rank_, step_ + 1, "backward");
  const double start = tracer_.now_us();
  const auto& steps = current_->exec->backward_steps();
  for (size_t k = 0; k < steps.size(); ++k) {
    run_op(steps[k].op, mb);
    for (TensorRef t : current_->backward_releases[k]) mb.values[t.op][t.index] = Tensor();
  }
  pacer_.begin();  // accumulating the gradients is the device's compute too
  for (ParamState& s : params_) {
    const TensorRef g = model_.grads[s.index];
    const Tensor& value = mb.values[g.op][g.index];
    HSPMD_ASSERT(value.defined()) << "rank " << rank_ << ": no gradient of '" << s.name << "' after B" << mb.index;
    if (!s.grad.defined()) {
      s.grad = value.clone(allocator_.get());
    } else {
      kernels::add(s.grad, value, s.grad);
    }
  }
  pacer_.end();
  pace();
  mb.values.clear();
  tracer_.record(std::string("B").append(std::to_string(mb.index)), "compute", start, tracer_.now_us());
}

double DistTrainer::run_passes(const std::vector<data::Segment>& segments, int64_t labels, bool train) {
  const TrainerOptions& o = options_.train;
  std::vector<data::PartSpec> parts;
  for (const sharding::PipelineSchedule& p : current_->exec->plan().pipelines) {
    parts.push_back({static_cast<double>(p.micro_batch_size) * p.num_micro_batches, p.num_micro_batches});
  }
  const bool dispatched = train && options_.split_batch;
  const auto split = dispatched ? options_.split_batch(segments) : data::split_global_batch(segments, parts);
  HSPMD_CHECK(split.size() == parts.size()) << "rank " << rank_ << ": the dispatch split the batch over " << split.size()
                                            << " pipelines, plan " << current_->name << " has " << parts.size();
  const std::remove_cvref_t<decltype(split.at(0))> none;  // a spare runs no micro-batch
  const auto& mine = current_->active ? split.at(current_->exec->data_group()) : none;
  // A dispatched pipeline runs as many micro-batches as it was given, under the plan's schedule kind.
  const std::vector<specialize::Task>* schedule = &current_->schedule;
  std::vector<specialize::Task> dispatched_schedule;
  if (dispatched && current_->active && static_cast<int>(mine.size()) != parts[current_->exec->data_group()].micro_batches) {
    const auto [pipeline, stage] = current_->layout.locate(rank_);
    const int stages = static_cast<int>(current_->layout.pipelines[pipeline].stages.size());
    if (!mine.empty()) {
      dispatched_schedule = specialize::make_schedule(options_.schedule, static_cast<int>(mine.size()), stages, stage);
    }
    schedule = &dispatched_schedule;
  }

  std::vector<MicroBatch> batches(mine.size());
  double loss_sum = 0;
  for (const specialize::Task& task : *schedule) {
    MicroBatch& mb = batches.at(task.micro_batch);
    if (!task.forward) {
      if (train) backward(mb);
      continue;
    }
    mb.index = task.micro_batch;
    // A context-parallel pipeline feeds its tokens in the load-balanced order of its CP group.
    const data::ContextParallelBatch laid_out = data::zigzag_for_context_parallel(
        data::pack(mine[task.micro_batch], {.seq_len = o.seq_len, .layout = options_.layout}),
        context_parallel_degree());
    graph::TensorMap feeds = llama_feeds(laid_out.batch, labels, laid_out.order);
    for (int id : current_->exec->placeholders()) {
      const std::string& name = model_.graph.op(id).name;
      mb.feeds[name] = feeds.at(name);
    }
    mb.binding = model_.graph.bind(mb.feeds);
    for (int id : current_->exec->placeholders()) {  // after binding: the symbols are the pipeline's
      const std::string& name = model_.graph.op(id).name;
      mb.feeds[name] = own_part(current_->exec->annotation({id, 0}), mb.feeds[name]);
    }
    forward(mb);
    loss_sum += mb.loss;
    if (!train) mb.values.clear();  // no backward pass will read them
  }
  return loss_sum;
}

bool DistTrainer::counts_loss() const {
  // Each pipeline's last stage counts its micro-batches once: the first rank of its TP group (of
  // each CP rank, whose losses are partial sums over its own tokens).
  const Annotation& loss = current_->exec->annotation(model_.loss);
  const auto where = loss.locate(rank_);
  return where && loss.ds(where->first).coord(where->second, sharding::kDuplicate) == 0 &&
         (loss.hdim() == sharding::kPartial || where->first == 0);
}

int DistTrainer::context_parallel_degree() const {
  // The pipeline's token_index is split over its CP ranks (models/llama_plan.h); a spare has none.
  const Annotation& a = current_->exec->annotation(model_.token_index);
  const auto where = a.locate(rank_);
  return where ? a.ds(where->first).degree(0) : 1;
}

Tensor DistTrainer::own_part(const Annotation& a, const Tensor& fed) const {
  // A pipeline feeds whole tensors; a placeholder split inside its group (tokens over CP) is cut.
  const auto where = a.locate(rank_);
  if (!where || a.ds(where->first).is_trivial()) return fed;
  const Region whole = Region::full(fed.shape());
  const Region mine = a.ds(where->first).region(where->second, whole);
  return mine == whole ? fed : copy_out(fed, whole, mine, allocator_.get());
}

double DistTrainer::evaluate(const data::TokenDataset& dataset, int64_t max_tokens) {
  const TrainerOptions& o = options_.train;
  // Always the same batches: the first ones of a fixed order.
  data::Loader loader(dataset, {.seq_len = o.seq_len, .global_batch_tokens = o.global_batch_tokens, .seed = 0});
  std::vector<double> totals{0.0, 0.0};  // sum over batches of (mean loss x labels), labels
  int64_t tokens = 0;
  while (tokens < std::max<int64_t>(max_tokens, 1) && loader.state().epoch == 0) {
    const std::vector<data::Segment> segments = loader.next();
    const data::Batch global = data::pack(segments, {.seq_len = o.seq_len});
    const int64_t labels = global.num_label_tokens();
    tokens += global.num_tokens();
    if (labels == 0) continue;
    const double loss = run_passes(segments, labels, /*train=*/false);
    if (counts_loss()) totals[0] += loss * static_cast<double>(labels);
    totals[1] += static_cast<double>(labels);
  }
  session_.wait_deferred();
  std::vector<double> sum{totals[0]};
  all_ranks_group()->allreduce({.data = comm::CommBuffer::of(sum)}).wait();
  HSPMD_CHECK(totals[1] > 0) << "evaluation data " << dataset.dir() << " has no labelled token";
  return sum[0] / totals[1];
}

StepMetrics DistTrainer::step() {
  const auto start = Clock::now();
  const TrainerOptions& o = options_.train;

  // The global batch, the same on every rank; this pipeline's share, micro-batch by micro-batch.
  step_start_ = loader_->state();
  in_step_ = true;
  synced_grads_.reset();
  std::vector<data::Segment> segments = loader_->next();
  const data::Batch global = data::pack(segments, {.seq_len = o.seq_len});
  const int64_t labels = global.num_label_tokens();
  const double loss_sum = run_passes(segments, labels, /*train=*/true);
  const double loss = post(loss_sum);
  in_step_ = false;

  StepMetrics m;
  m.step = step_;
  m.loss = loss;
  m.lr = lr_schedule_.at(step_);
  m.tokens = global.num_tokens();
  m.label_tokens = labels;
  m.step_seconds = seconds_since(start);
  m.tokens_per_second = m.step_seconds > 0 ? static_cast<double>(m.tokens) / m.step_seconds : 0.0;
  m.peak_bytes = allocator_->peak_bytes();
  m.grad_norm = last_grad_norm_;
  return m;
}

double DistTrainer::post(double loss_sum) {
  const double start = tracer_.now_us();
  session_.wait_deferred();
  // Gradient sync into the optimizer-state layout; squares of the elements this rank counts.
  double squares = 0;
  std::vector<Tensor> grads(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    ParamState& s = params_[i];
    if (!s.grad.defined()) {  // no micro-batch reached this stage: a zero contribution
      s.grad = Tensor::zeros(s.grad_annotation.region(rank_, s.shape)->shape(), DType::kFloat32, allocator_.get());
    }
    const resolve::Resolution& r = cache_.resolve(s.grad_annotation, s.state_annotation, s.shape, s.name + ".grad");
    grads[i] = execute_reshard(r, s.shape, rank_, s.grad, session_, "post");
    s.grad = Tensor();
    if (counts_once(s.state_annotation, s.shape, rank_)) squares += kernels::sum_squares(grads[i]);
    fault_point(rank_, step_ + 1, "grad-sync");
  }
  // Kept until the update: if the totals reach another rank but not this one, it can still apply
  // the step after a failure (finish_interrupted_step).
  synced_grads_ = grads;
  std::vector<double> totals{squares, counts_loss() ? loss_sum : 0.0};
  all_ranks_group()->allreduce({.data = comm::CommBuffer::of(totals)}).wait();
  if (commits_.step) commits_.step(step_ + 1, totals);  // before any weight changes anywhere
  apply_update(grads, totals, /*gather=*/true);
  synced_grads_.reset();
  session_.wait_deferred();
  tracer_.record("post", "optimizer", start, tracer_.now_us());
  return totals[1];
}

void DistTrainer::apply_update(std::vector<Tensor>& grads, const std::vector<double>& totals, bool gather) {
  const TrainerOptions& o = options_.train;
  const double norm = std::sqrt(totals[0]);
  last_grad_norm_ = norm;
  ++step_;
  const double lr = lr_schedule_.at(step_);
  const double clip = o.max_grad_norm > 0 && norm > o.max_grad_norm ? o.max_grad_norm / norm : 1.0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (i == params_.size() / 2) fault_point(rank_, step_, "optimizer");  // half the weights updated
    ParamState& s = params_[i];
    pacer_.begin();  // the optimizer runs on the device
    kernels::AdamWOptions a{.lr = lr,
                            .beta1 = o.beta1,
                            .beta2 = o.beta2,
                            .eps = o.eps,
                            .weight_decay = s.decay ? o.weight_decay : 0.0,
                            .grad_scale = clip};
    if (s.state_annotation == s.annotation) {
      kernels::adamw_step(s.value, grads[i], s.exp_avg, s.exp_avg_sq, step_, a);
      pacer_.end();
      continue;
    }
    // ZeRO-1: update this rank's slice, then gather the parameter back from the state shards.
    Tensor slice = copy_out(s.value, s.region, s.state_region, allocator_.get());
    kernels::adamw_step(slice, grads[i], s.exp_avg, s.exp_avg_sq, step_, a);
    pacer_.end();
    if (!gather) {
      kernels::copy_region(slice, std::vector<int64_t>(slice.shape().rank(), 0), s.value,
                           offsets_in(s.region, s.state_region), s.state_region.shape().dims());
      continue;
    }
    pace();
    const resolve::Resolution& r = cache_.resolve(s.state_annotation, s.annotation, s.shape, s.name);
    s.value.copy_from(execute_reshard(r, s.shape, rank_, slice, session_, "post"));
  }
  pace();
}

}  // namespace hspmd::runtime
