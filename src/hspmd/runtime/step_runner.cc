#include "hspmd/runtime/dist_trainer.h"

#include <string>

#include "hspmd/core/error.h"
#include "hspmd/data/context_parallel.h"
#include "hspmd/data/packing.h"
#include "hspmd/graph/op_registry.h"
#include "hspmd/graph/run_kernel.h"
#include "hspmd/kernels/elementwise.h"
#include "hspmd/runtime/fault_injection.h"
#include "hspmd/specialize/reshard_resolution.h"

// DistTrainer (runtime/dist_trainer.h): the step runner. One global batch through this rank's
// schedule: each micro-batch packed and fed, F and B op by op (each value freed after its last
// reader), the Reshards executed, parameter gradients summed over micro-batches.
namespace hspmd::runtime {

using graph::OpKind;
using graph::TensorRef;
using sharding::Annotation;
using sharding::Region;

// The forward values of one micro-batch, kept from F until B.
struct DistTrainer::MicroBatch {
  int index = 0;
  graph::TensorMap feeds;
  SymBinding binding;
  std::vector<std::vector<Tensor>> values;  // [op][output]
  double loss = 0;
};

void DistTrainer::pace() { pacer_.pad(); }

Tensor DistTrainer::run_reshard(int id, const Tensor& src, const SymBinding& binding, const std::string& channel) {
  const graph::Op& op = current_->exec->op(id);
  const TensorRef in = op.inputs[0], out{id, 0};
  const SymShape& shape = graph_.graph.info(out).shape;
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
  return execute_reshard(*mine->resolution, mine->shape, rank_, src, session_, channel, graph_.graph.info(out).dtype);
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
        << "rank " << rank_ << ", op '" << op.name << "': input '" << graph_.graph.tensor_name(in) << "' is not here";
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
  mb.values.assign(graph_.graph.num_ops(), {});
  for (int id : current_->exec->placeholders()) mb.values[id] = {mb.feeds.at(graph_.graph.op(id).name)};
  for (const TensorState& s : state_.tensors) mb.values[graph_.params[s.param].op] = {s.value};
  const std::vector<int>& ops = current_->exec->forward_ops();
  for (size_t k = 0; k < ops.size(); ++k) {
    run_op(ops[k], mb);
    for (TensorRef t : current_->forward_releases[k]) mb.values[t.op][t.index] = Tensor();  // B keeps what it reads
  }
  pace();
  if (current_->exec->holds(graph_.loss)) mb.loss = mb.values[graph_.loss.op][graph_.loss.index].element_as_double(0);
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
  for (TensorState& s : state_.tensors) {
    const TensorRef g = graph_.grads[s.param];
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
  const data::BatchSplit split =
      dispatched ? options_.split_batch(segments) : data::split_global_batch(segments, parts);
  HSPMD_CHECK(split.size() == parts.size()) << "rank " << rank_ << ": the dispatch split the batch over " << split.size()
                                            << " pipelines, plan " << current_->name << " has " << parts.size();
  const std::vector<data::MicroBatchSegments> none;  // a spare runs no micro-batch
  const std::vector<data::MicroBatchSegments>& mine = current_->active ? split.at(current_->exec->data_group()) : none;
  // A dispatched pipeline runs as many micro-batches as it was given, under the plan's schedule kind.
  const std::vector<specialize::Task>* schedule = &current_->schedule;
  std::vector<specialize::Task> dispatched_schedule;
  if (dispatched && current_->active && static_cast<int>(mine.size()) != parts[current_->exec->data_group()].micro_batches) {
    const auto [pipeline, stage] = current_->pipelines.locate(rank_);
    const int stages = static_cast<int>(current_->pipelines.pipelines[pipeline].stages.size());
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
        model_->context_parallel_degree(current_->exec->plan(), rank_));
    graph::TensorMap feeds = model_->feeds(laid_out.batch, labels, laid_out.order);
    for (int id : current_->exec->placeholders()) {
      const std::string& name = graph_.graph.op(id).name;
      mb.feeds[name] = feeds.at(name);
    }
    mb.binding = graph_.graph.bind(mb.feeds);
    for (int id : current_->exec->placeholders()) {  // after binding: the symbols are the pipeline's
      const std::string& name = graph_.graph.op(id).name;
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
  const Annotation& loss = current_->exec->annotation(graph_.loss);
  const auto where = loss.locate(rank_);
  return where && loss.ds(where->first).coord(where->second, sharding::kDuplicate) == 0 &&
         (loss.hdim() == sharding::kPartial || where->first == 0);
}

Tensor DistTrainer::own_part(const Annotation& a, const Tensor& fed) const {
  // A pipeline feeds whole tensors; a placeholder split inside its group (tokens over CP) is cut.
  const auto where = a.locate(rank_);
  if (!where || a.ds(where->first).is_trivial()) return fed;
  const Region whole = Region::full(fed.shape());
  const Region mine = a.ds(where->first).region(where->second, whole);
  return mine == whole ? fed : copy_out(fed, whole, mine, allocator_.get());
}

}  // namespace hspmd::runtime
