#include "hspmd/runtime/step_runner.h"

#include <map>
#include <string>
#include <utility>

#include "hspmd/core/error.h"
#include "hspmd/data/context_parallel.h"
#include "hspmd/graph/run_kernel.h"
#include "hspmd/graph/token_loss.h"
#include "hspmd/kernels/elementwise.h"
#include "hspmd/runtime/fault_injection.h"
#include "hspmd/runtime/gradient_sync.h"
#include "hspmd/runtime/parameter_gathers.h"
#include "hspmd/specialize/reshard_resolution.h"

namespace hspmd::runtime {

using graph::OpKind;
using graph::TensorRef;
using sharding::Annotation;
using sharding::Region;

// The forward values of one micro-batch, kept from F until B.
struct StepRunner::MicroBatch {
  int index = 0;
  graph::TensorMap feeds;
  SymBinding binding;
  std::vector<std::vector<Tensor>> values;  // [op][output]
};

struct StepRunner::Share {
  std::vector<data::MicroBatchSegments> micro_batches;  // none on a spare
  std::vector<specialize::Task> schedule;               // the order that runs them
  int fewest_micro_batches = 0;                         // of any pipeline of the plan
};

StepRunner::StepRunner(const models::Model& model, const models::ModelGraph& graph, int rank,
                       StepRunnerOptions options, StepRunnerParts parts)
    : model_(model), graph_(graph), rank_(rank), options_(std::move(options)), parts_(parts) {}

StepRunner::~StepRunner() = default;

double StepRunner::run(const SpecializedPlan& plan, ShardedState& state, const std::vector<data::Segment>& segments,
                       int64_t labels, StepPass pass) {
  plan_ = &plan;
  step_ = pass.step;
  layout_ = pass.layout.value_or(options_.layout);
  const Share share = share_of(plan, segments, pass.train);
  std::vector<MicroBatch> batches(share.micro_batches.size());
  // The backward passes that make gradients final: under ZeRO-2 the last of each group of
  // micro-batches (reduced into the shards; ZeRO-3's groups are single micro-batches), else this rank's last (synced meanwhile when the sync
  // overlaps; without overlap the trainer's Post syncs them all).
  const bool into_shards = pass.train && plan.exec->plan().shard_gradients;
  std::vector<int> group_ends;
  if (into_shards) {
    group_ends = gradient_group_ends(static_cast<int>(batches.size()), std::max(1, share.fewest_micro_batches));
  } else if (pass.train && parts_.gradient_sync.overlaps() && !batches.empty()) {
    group_ends = {static_cast<int>(batches.size())};
  }
  size_t next_group = 0;
  int backwards = 0;
  // On the device, in the schedule's order: the host's float64 additions, without a wait per loss.
  const bool caller_reads = pass.loss_total.defined();
  loss_total_ = caller_reads ? pass.loss_total : Tensor::zeros(Shape{1}, DType::kFloat64, &parts_.allocator);
  loss_at_ = caller_reads ? pass.loss_at : 0;
  for (const specialize::Task& task : share.schedule) {
    MicroBatch& mb = batches.at(task.micro_batch);
    if (!task.forward) {
      if (!pass.train) continue;
      ++backwards;
      GradientRound round = GradientRound::kNone;
      if (next_group < group_ends.size() && group_ends[next_group] == backwards) {
        ++next_group;
        round = into_shards ? GradientRound::kIntoShards : GradientRound::kSynced;
      }
      backward(mb, state, round);
      continue;
    }
    mb.index = task.micro_batch;
    feed(mb, share.micro_batches[task.micro_batch], labels);
    forward(mb, state);
    if (!pass.train) mb.values.clear();  // no backward pass will read them
  }
  plan_ = nullptr;
  const Tensor total = std::exchange(loss_total_, Tensor());
  return caller_reads ? 0.0 : parts_.compute.read_to_host(total).element_as_double(0);
}

StepRunner::Share StepRunner::share_of(const SpecializedPlan& plan, const std::vector<data::Segment>& segments,
                                       bool train) const {
  std::vector<data::PartSpec> parts;
  for (const sharding::PipelineSchedule& p : plan.exec->plan().pipelines) {
    parts.push_back({static_cast<double>(p.micro_batch_size) * p.num_micro_batches, p.num_micro_batches});
  }
  const bool dispatched = train && options_.split_batch;
  data::BatchSplit split = dispatched ? options_.split_batch(segments) : data::split_global_batch(segments, parts);
  HSPMD_CHECK(split.size() == parts.size()) << "rank " << rank_ << ": the dispatch split the batch over "
                                            << split.size() << " pipelines, plan " << plan.name << " has "
                                            << parts.size();
  int fewest = static_cast<int>(split.front().size()), most = fewest;
  for (const auto& pipeline : split) {
    fewest = std::min(fewest, static_cast<int>(pipeline.size()));
    most = std::max(most, static_cast<int>(pipeline.size()));
  }
  // Every holder of a parameter gathers it once per pass it runs (runtime/parameter_gathers.h).
  HSPMD_CHECK(!plan.exec->plan().shard_parameters || fewest == most)
      << "plan " << plan.name << ": ZeRO-3 (\"zero\": 3) needs every pipeline to run as many micro-batches, but the "
      << "dispatch gave between " << fewest << " and " << most << "; use \"zero\": 2 with dispatch by length";
  if (!plan.active) return {};  // a spare runs no micro-batch
  const int group = plan.exec->data_group();
  Share share{std::move(split.at(group)), plan.schedule, fewest};
  // A dispatched pipeline runs as many micro-batches as it was given, under the plan's schedule kind.
  const int given = static_cast<int>(share.micro_batches.size());
  if (dispatched && given != parts[group].micro_batches) {
    const auto [pipeline, stage] = plan.pipelines.locate(rank_);
    const int stages = static_cast<int>(plan.pipelines.pipelines[pipeline].stages.size());
    share.schedule = given == 0 ? std::vector<specialize::Task>{}
                                : specialize::make_schedule(options_.schedule, given, stages, stage);
    if (given > 0 && plan.exec->plan().shard_parameters) {  // every pipeline was given as many (above)
      for (const switching::ParamLayout& layout : plan.param_layouts) {
        specialize::check_passes_in_lockstep(plan.pipelines, options_.schedule, given, layout.name,
                                             layout.read.devices());
      }
    }
  }
  return share;
}

void StepRunner::feed(MicroBatch& mb, const data::MicroBatchSegments& segments, int64_t labels) const {
  // A context-parallel pipeline feeds its tokens in one load-balanced order, which each of its
  // stages splits evenly over its CP ranks (models::Model::context_parallel_degree); under a plan
  // with sequence-parallel stages the rows are padded so that those split them evenly too.
  const sharding::AnnotationPlan& plan = plan_->exec->plan();
  const data::ContextParallelBatch laid_out = data::zigzag_for_context_parallel(
      data::pack(segments, {.seq_len = options_.seq_len, .layout = layout_}),
      model_.context_parallel_degree(plan, rank_),
      plan.pipelines.at(plan_->exec->data_group()).sequence_parallel_multiple);
  graph::TensorMap feeds = model_.feeds(laid_out.batch, labels, laid_out.order);
  for (int id : plan_->exec->placeholders()) {
    const std::string& name = graph_.graph.op(id).name;
    mb.feeds[name] = feeds.at(name);
  }
  mb.binding = graph_.graph.bind(mb.feeds);
  for (int id : plan_->exec->placeholders()) {  // after binding: the symbols are the pipeline's
    const std::string& name = graph_.graph.op(id).name;
    mb.feeds[name] = own_part(plan_->exec->annotation({id, 0}), mb.feeds[name]);
    // The batch is read on the host; a GPU rank computes on a copy (a no-op on the host).
    if (mb.feeds[name].device() != parts_.allocator.device()) {
      mb.feeds[name] = mb.feeds[name].clone(&parts_.allocator);
    }
  }
}

void StepRunner::forward(MicroBatch& mb, ShardedState& state) {
  fault_point(rank_, step_, "forward");
  const double start = parts_.tracer.now_us();
  mb.values.assign(graph_.graph.num_ops(), {});
  for (int id : plan_->exec->placeholders()) mb.values[id] = {mb.feeds.at(graph_.graph.op(id).name)};
  const bool sharded = plan_->exec->plan().shard_parameters;  // ZeRO-3: gathered layer by layer below
  if (!sharded) {
    for (const TensorState& s : state.tensors) mb.values[graph_.params[s.param].op] = {s.value};
  }
  ParameterGathers gathers = parameter_gathers(plan_->forward_gathers, state);
  const std::vector<int>& ops = plan_->exec->forward_ops();
  for (size_t k = 0; k < ops.size(); ++k) {
    if (sharded) gathers.before(static_cast<int>(k), mb.values);
    run_op(ops[k], mb);
    for (TensorRef t : plan_->forward_releases[k]) mb.values[t.op][t.index] = Tensor();  // B keeps what it reads
    if (sharded) gathers.after(static_cast<int>(k), mb.values);
  }
  parts_.pacer.pad();
  if (plan_->exec->holds(graph_.loss)) {
    parts_.compute.add_to_total(mb.values[graph_.loss.op][graph_.loss.index], loss_total_, loss_at_);
  }
  parts_.tracer.record(std::string("F").append(std::to_string(mb.index)), "compute", start, parts_.tracer.now_us());
}

void StepRunner::backward(MicroBatch& mb, ShardedState& state, GradientRound round) {
  fault_point(rank_, step_, "backward");
  const double start = parts_.tracer.now_us();
  const auto& steps = plan_->exec->backward_steps();
  const bool sharded = plan_->exec->plan().shard_parameters;
  HSPMD_ASSERT(!sharded || round == GradientRound::kIntoShards)
      << "rank " << rank_ << ": ZeRO-3 reduces every micro-batch's gradients";
  BucketedGradientSync& sync = parts_.gradient_sync;
  // ZeRO-3 hands each gradient to the sync as B produces it (below), with no sum in the state; the
  // others' final gradients go to the sync from the state's sums.
  const bool final = round != GradientRound::kNone;
  // Overlapped, each final gradient goes to the sync as soon as the op computing it has run.
  const bool as_computed = final && !sharded && sync.overlaps();
  std::vector<std::vector<size_t>> finished_by(as_computed ? graph_.graph.num_ops() : 0);  // op -> tensors
  if (as_computed) {
    for (size_t i = 0; i < state.tensors.size(); ++i) finished_by[graph_.grads[state.tensors[i].param].op].push_back(i);
  }
  std::vector<bool> handed(state.tensors.size(), false);
  if (final) sync.begin_round(round == GradientRound::kIntoShards);
  ParameterGathers gathers = parameter_gathers(plan_->backward_gathers, state);
  // ZeRO-3: each gradient goes to the sync as soon as B has produced it (every holder produces it
  // at the same position of the same steps); the sync reduces it into its shard, in that order.
  std::map<int, std::vector<size_t>> produced;  // gradient op id -> the tensors it ends
  if (sharded) {
    for (size_t i = 0; i < state.tensors.size(); ++i) produced[graph_.grads[state.tensors[i].param].op].push_back(i);
  }
  for (size_t k = 0; k < steps.size(); ++k) {
    if (sharded) gathers.before(static_cast<int>(k), mb.values);
    run_op(steps[k].op, mb);
    for (TensorRef t : plan_->backward_releases[k]) mb.values[t.op][t.index] = Tensor();
    if (sharded) {
      gathers.after(static_cast<int>(k), mb.values);
      const auto done = produced.find(steps[k].op);
      if (done == produced.end()) continue;
      std::vector<std::pair<size_t, Tensor>> grads;
      for (size_t i : done->second) {
        const TensorRef g = graph_.grads[state.tensors[i].param];
        Tensor& value = mb.values[g.op][g.index];
        HSPMD_ASSERT(value.defined()) << "rank " << rank_ << ": no gradient of '" << state.tensors[i].name
                                      << "' in B" << mb.index;
        grads.emplace_back(i, std::exchange(value, Tensor()));
      }
      sync.gradients_produced(std::move(grads));
      produced.erase(done);
      continue;
    }
    if (!as_computed) continue;
    for (size_t i : finished_by[steps[k].op]) {
      parts_.pacer.begin();
      accumulate(mb, state.tensors[i], /*final=*/true);
      parts_.pacer.end();
      handed[i] = true;
      sync.gradient_done(i);
    }
  }
  HSPMD_ASSERT(produced.empty()) << "rank " << rank_ << ": B" << mb.index << " did not produce the gradient of '"
                                 << state.tensors[produced.begin()->second.front()].name << "'";
  if (!sharded) {
    parts_.pacer.begin();  // accumulating the gradients is the device's compute too
    for (size_t i = 0; i < state.tensors.size(); ++i) {
      if (!handed[i]) accumulate(mb, state.tensors[i], final);
    }
    parts_.pacer.end();
  }
  parts_.pacer.pad();
  parts_.tracer.record(std::string("B").append(std::to_string(mb.index)), "compute", start, parts_.tracer.now_us());
  for (size_t i = 0; i < state.tensors.size(); ++i) {  // without overlap: the whole round now
    if (final && !sharded && !handed[i]) sync.gradient_done(i);
  }
  mb.values.clear();
  if (final) sync.end_round();
}

void StepRunner::accumulate(MicroBatch& mb, TensorState& s, bool final) {
  const TensorRef g = graph_.grads[s.param];
  Tensor& value = mb.values[g.op][g.index];
  HSPMD_ASSERT(value.defined()) << "rank " << rank_ << ": no gradient of '" << s.name << "' after B" << mb.index;
  if (s.grad.defined()) {
    parts_.compute.add(s.grad, value, s.grad);
  } else {
    // A sum later micro-batches add to is a copy; a final one is only read (by the sync).
    s.grad = final ? value : value.clone(&parts_.allocator);
  }
  // A final gradient is the sync's from now on: it frees it once reduced.
  if (final) value = Tensor();
}

ParameterGathers StepRunner::parameter_gathers(const std::vector<specialize::GatherUnit>& units,
                                               const ShardedState& state) {
  // On the gradient sync's thread, behind the gradients B handed over before: one order of
  // gathers and reductions on every holder (runtime/bucketed_gradient_sync.h).
  BucketedGradientSync& sync = parts_.gradient_sync;
  return ParameterGathers(
      units, state, graph_.params,
      [this](const TensorState& s) {
        const double start = parts_.tracer.now_us();
        const resolve::Resolution& r = parts_.resolutions.resolve(s.annotation, s.read_annotation, s.shape, s.name);
        Tensor whole =
            execute_reshard_staged(r, s.shape, rank_, s.value, parts_.session, kGradientChannel, parts_.allocator);
        parts_.tracer.record(s.name + ".gather", "comm", start, parts_.tracer.now_us());
        return whole;
      },
      {[&sync](std::function<void()> job) { return sync.submit_after_gradients(std::move(job)); },
       [&sync](uint64_t ticket) { sync.wait_for(ticket); }});
}

void StepRunner::run_op(int id, MicroBatch& mb) {
  const graph::Op& op = plan_->exec->op(id);
  std::vector<Tensor>& outs = mb.values[id];
  if (op.kind == OpKind::kReshard) {
    parts_.pacer.pad();
    const TensorRef in = op.inputs[0];
    const Tensor src = plan_->exec->holds(in) ? mb.values[in.op][in.index] : Tensor();
    outs = {run_reshard(id, src, mb.binding, op.backward ? "B" : "F")};
    return;
  }
  // After a peer's death (elastic training aborts the groups) this step is lost: stop computing
  // it now rather than at the next communication, which on a large model is seconds away.
  if (std::string why = parts_.session.groups().aborted(); !why.empty()) {
    throw Error(where(op.name) + "step abandoned: communication was aborted (" + why + ")");
  }
  parts_.pacer.begin();
  std::vector<Tensor> inputs;
  for (TensorRef in : op.inputs) {
    HSPMD_ASSERT(mb.values[in.op].size() > static_cast<size_t>(in.index) && mb.values[in.op][in.index].defined())
        << "rank " << rank_ << ", op '" << op.name << "': input '" << graph_.graph.tensor_name(in) << "' is not here";
    inputs.push_back(mb.values[in.op][in.index]);
  }
  std::vector<Shape> shapes;
  for (int i = 0; i < static_cast<int>(op.outputs.size()); ++i)
    shapes.push_back(plan_->exec->local_shape({id, i}, mb.binding));
  graph::KernelContext ctx{op, inputs, shapes, &parts_.allocator, {}, {}};
  const std::vector<int>& vocab_shards = plan_->exec->vocab_shard_ranks(id);
  if (graph::gathers_vocab_shards(op.kind) && !vocab_shards.empty()) {
    ctx.gather_vocab_shards = [&](const Tensor& mine) { return gather_vocab_shards(op, vocab_shards, mine); };
  }
  graph::run_kernel(ctx, {.kernels = parts_.compute.kernels, .device = parts_.allocator.device().type, .rank = rank_});
  outs = std::move(ctx.outputs);
  parts_.pacer.end();
}

Tensor StepRunner::gather_vocab_shards(const graph::Op& op, const std::vector<int>& shards, const Tensor& mine) {
  // Vocab-parallel loss: the shards' row statistics meet in one all-gather (graph/ops/cross_entropy.cc).
  parts_.pacer.end();
  parts_.pacer.pad();
  const double begin = parts_.tracer.now_us();
  Tensor all =
      Tensor::empty(Shape{static_cast<int64_t>(shards.size()), mine.numel()}, mine.dtype(), mine.allocator());
  parts_.session.group(shards, "F")
      ->allgather({.input = comm::CommBuffer::of(mine), .output = comm::CommBuffer::of(all)})
      .wait();
  parts_.tracer.record(op.name + ".vocab_gather", "comm", begin, parts_.tracer.now_us());
  parts_.pacer.begin();
  return all;
}

Tensor StepRunner::run_reshard(int id, const Tensor& src, const SymBinding& binding, const std::string& channel) {
  const specialize::ExecGraph& exec = *plan_->exec;
  const graph::Op& op = exec.op(id);
  const TensorRef in = op.inputs[0], out{id, 0};
  const SymShape& shape = graph_.graph.info(out).shape;
  std::vector<specialize::GroupResolution> all = specialize::resolve_reshard(
      exec.annotation(in), exec.annotation(out), shape, {binding}, op.name, parts_.resolutions);
  const specialize::GroupResolution* mine = specialize::resolution_of(all, rank_);
  if (mine == nullptr) return Tensor();
  // A whole-tensor resolution was computed from this rank's symbols alone: only sound when the
  // shape has none (another pipeline may bind them differently).
  HSPMD_CHECK(mine->group >= 0 || is_static(shape))
      << "Reshard '" << op.name << "' changes the top tier of an activation (" << exec.annotation(in).to_string()
      << " -> " << exec.annotation(out).to_string() << "); pipelines with their own micro-batch shapes cannot do that";
  const double start = parts_.tracer.now_us();
  Tensor result = execute_reshard_staged(*mine->resolution, mine->shape, rank_, src, parts_.session, channel,
                                         parts_.allocator, graph_.graph.info(out).dtype);
  // Only a rank that sent, received or copied has the Reshard in its trace (a BSR's unchosen owners
  // have none).
  if (parts_.tracer.enabled() && !mine->resolution->ops_of(rank_).empty()) {
    parts_.tracer.record(op.name, "comm", start, parts_.tracer.now_us());
  }
  return result;
}

bool StepRunner::counts_loss(const SpecializedPlan& plan) const {
  // Each pipeline's last stage counts its micro-batches once: the first rank of its TP group (of
  // each CP rank, whose losses are partial sums over its own tokens).
  const Annotation& loss = plan.exec->annotation(graph_.loss);
  const auto where = loss.locate(rank_);
  return where && loss.ds(where->first).coord(where->second, sharding::kDuplicate) == 0 &&
         (loss.hdim() == sharding::kPartial || where->first == 0);
}

Tensor StepRunner::own_part(const Annotation& a, const Tensor& fed) const {
  // A pipeline feeds whole tensors; a placeholder split inside its group (tokens over CP) is cut.
  const auto where = a.locate(rank_);
  if (!where || a.ds(where->first).is_trivial()) return fed;
  const Region whole = Region::full(fed.shape());
  const Region mine = a.ds(where->first).region(where->second, whole);
  return mine == whole ? fed : copy_out(fed, whole, mine, &parts_.allocator);
}

std::string StepRunner::where(const std::string& op) const {
  std::string s = "rank ";
  return s.append(std::to_string(rank_)).append(", op '").append(op).append("': ");
}

}  // namespace hspmd::runtime
