#include "hspmd/runtime/dist_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <sstream>

#include "hspmd/core/elapsed.h"
#include "hspmd/core/error.h"
#include "hspmd/data/packing.h"
#include "hspmd/kernels/adamw.h"
#include "hspmd/kernels/reduce.h"
#include "hspmd/kernels/slice.h"
#include "hspmd/kernels/threading.h"
#include "hspmd/runtime/fault_injection.h"
#include "hspmd/runtime/rank_compute.h"

// DistTrainer (runtime/dist_trainer.h): construction, the step (the step runner's passes, Post,
// AdamW) and evaluation.
namespace hspmd::runtime {

namespace {

using Clock = std::chrono::steady_clock;

int64_t bucket_bytes(double mib) {
  HSPMD_CHECK(std::isfinite(mib) && mib >= 0) << "grad_bucket_mb " << mib << ": must be >= 0 (0: no overlap)";
  return std::llround(mib * (1 << 20));
}

std::vector<int> all_ranks(int world) {
  std::vector<int> r(world);
  std::iota(r.begin(), r.end(), 0);
  return r;
}

}  // namespace

DistTrainer::DistTrainer(std::shared_ptr<const models::Model> model, const data::TokenDataset& dataset,
                         const sharding::AnnotationPlan& plan, DistOptions options, int rank, int world_size,
                         comm::GroupCache& groups)
    : DistTrainer(std::move(model), &dataset, plan, std::move(options), rank, world_size, groups) {}

DistTrainer::DistTrainer(std::shared_ptr<const models::Model> model, const data::TokenDataset* dataset,
                         const sharding::AnnotationPlan& plan, DistOptions options, int rank, int world_size,
                         comm::GroupCache& groups)
    : options_(std::move(options)),
      model_(std::move(model)),
      graph_(model_->build({.precision = options_.train.precision, .fused_head_loss = options_.fused_head_loss})),
      dataset_(dataset),
      rank_(rank),
      world_size_(world_size),
      compute_(options_.compute ? options_.compute(rank) : rank_compute(options_.train, options_.device, rank)),
      allocator_(std::make_unique<Allocator>(compute_.allocator)),
      comm_memory_(compute_.allocator.device().type == DeviceType::kCPU || options_.comm_on_device
                       ? nullptr
                       : std::make_unique<Allocator>(Allocator::Options{
                             .capacity_bytes = 0, .name = "rank " + std::to_string(rank) + " host staging"})),
      session_(groups, rank, comm_memory_ ? comm_memory_.get() : allocator_.get(),
               comm_memory_ ? nullptr : compute_.copy_region),
      // The cluster's link tiers steer every step's BSRs (the sender on the receiver's node), as
      // they do the switches' and explain's.
      cache_(resolve::ResolveOptions{.topology = options_.topology}),
      plans_(graph_, rank,
             {.schedule = options_.schedule,
              .seq_len = options_.train.seq_len,
              .recompute = options_.train.recompute,
              .device = options_.device,
              .gradients_reduced_on_a_thread =
                  options_.grad_bucket_mb > 0 && compute_.allocator.device().type == DeviceType::kCPU},
             session_, cache_),
      lr_schedule_(optimizer_options(options_.train).schedule),
      pacer_(options_.device.speed),
      tracer_(rank, options_.trace),
      grad_sync_(rank, bucket_bytes(options_.grad_bucket_mb), compute_.allocator.device().type == DeviceType::kCPU,
                 {cache_, session_, compute_, pacer_, tracer_}),
      runner_(*model_, graph_, rank,
              {.seq_len = options_.train.seq_len,
               .schedule = options_.schedule,
               .layout = options_.layout,
               .split_batch = options_.split_batch},
              {*allocator_, session_, cache_, pacer_, tracer_, compute_, grad_sync_}) {
  const TrainerOptions& o = options_.train;
  members_ = options_.members.empty() ? all_ranks(world_size_) : options_.members;
  if (dataset_ != nullptr) check_dataset_fits(*dataset_, *model_);
  validate_options(o, *model_);
  HSPMD_CHECK(!options_.bf16_switches || o.precision == DType::kBFloat16)
      << "bf16-only switches (--switch-states bf16-params) move the parameters as bf16 values: they need "
         "--precision bf16, got --precision "
      << dtype_name(o.precision);
  if (o.threads > 0) kernels::set_num_threads(o.threads);
  current_ = &plans_.find_or_build(plan, options_.plan_name, members_);
  state_ = ShardedState::laid_out(*current_, graph_.params, rank_, optimizer_options(o));
  state_.initialize(graph_.graph, graph_.params, o.seed, allocator_.get());
  if (dataset_ != nullptr) {
    loader_ = std::make_unique<data::Loader>(
        *dataset_, data::LoaderOptions{.seq_len = o.seq_len, .global_batch_tokens = o.global_batch_tokens, .seed = o.seed});
  }
}

const data::LoaderState& DistTrainer::loader_state() const {
  static const data::LoaderState kStart;
  return loader_ ? loader_->state() : kStart;
}

void DistTrainer::reset_loader(const data::LoaderState& state) {
  if (loader_) loader_ = std::make_unique<data::Loader>(*dataset_, loader_->options(), state);
}

void DistTrainer::give_batch(std::vector<data::Segment> segments) {
  HSPMD_CHECK(!segments.empty()) << "a global batch needs at least one sequence";
  for (size_t i = 0; i < segments.size(); ++i) {
    const std::vector<int32_t>& t = segments[i].tokens;
    HSPMD_CHECK(std::ssize(t) >= 2) << "sequence " << i << " of the batch has " << t.size()
                                    << " tokens; a sequence needs at least 2 (an input and its next token)";
    HSPMD_CHECK(std::ssize(t) <= options_.train.seq_len)
        << "sequence " << i << " of the batch has " << t.size() << " tokens, more than seq_len "
        << options_.train.seq_len << " (raise seq_len, up to the model's max_position_embeddings "
        << model_->max_sequence_length() << ")";
    for (size_t k = 0; k < t.size(); ++k) {
      HSPMD_CHECK(t[k] >= 0 && t[k] < model_->vocab_size())
          << "sequence " << i << " of the batch: token id " << t[k] << " at position " << k
          << " is outside the model's vocabulary [0, " << model_->vocab_size() << ")";
    }
  }
  given_batch_ = std::move(segments);
}

double DistTrainer::evaluate(const std::vector<data::Segment>& segments) {
  const data::Batch global = data::pack(segments, {.seq_len = options_.train.seq_len});
  const int64_t labels = global.num_label_tokens();
  const double loss = run_passes(segments, labels, /*train=*/false, data::BatchLayout::kRows);
  session_.wait_deferred();
  std::vector<double> sum{runner_.counts_loss(*current_) ? loss : 0.0};
  all_ranks_group()->allreduce({.data = comm::CommBuffer::of(sum)}).wait();
  return sum[0];
}

std::shared_ptr<comm::Communicator> DistTrainer::all_ranks_group() {
  return session_.group(members_, "post");
}

DistTrainer::~DistTrainer() = default;

const specialize::ExecGraph& DistTrainer::exec_graph() const { return *computing().exec; }
const std::vector<specialize::Task>& DistTrainer::schedule() const { return computing().schedule; }
const specialize::PipelineLayout& DistTrainer::pipelines() const { return computing().pipelines; }
const std::string& DistTrainer::plan_name() const { return computing().name; }
bool DistTrainer::active() const { return computing().active; }

std::string DistTrainer::describe() const {
  const SpecializedPlan& p = computing();
  std::ostringstream out;
  if (!p.active) {
    out << "rank " << rank_ << ": spare under plan " << p.name
        << (current_->active ? " (computes nothing; holds its master state under plan " + current_->name + ")"
                             : std::string(" (holds no state; joins the loss reduction only)"));
    return out.str();
  }
  const auto [pipeline, stage] = p.pipelines.locate(rank_);
  const auto& stages = p.pipelines.pipelines[pipeline].stages;
  const sharding::PipelineSchedule& mb = p.exec->plan().pipelines[p.exec->data_group()];
  out << "rank " << rank_ << ": pipeline " << pipeline << ", stage " << stage + 1 << "/" << stages.size() << " "
      << sharding::DeviceGroup(stages[stage]).to_string() << ", " << mb.num_micro_batches << " micro-batches of "
      << mb.micro_batch_size << ", " << specialize::schedule_kind_name(options_.schedule) << ": "
      << specialize::to_string(p.schedule) << (p.exec->plan().recompute ? ", recomputing each layer in B" : "")
      << "; memory estimate " << p.memory.to_string();
  return out.str();
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
    if (runner_.counts_loss(*current_)) totals[0] += loss * static_cast<double>(labels);
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
  HSPMD_CHECK(given_batch_ || loader_) << "no batch for step " << step_ + 1
                                       << ": this trainer has no dataset, so every step needs a given batch";
  step_start_ = loader_state();
  in_step_ = true;
  synced_grads_.reset();
  const bool given = given_batch_.has_value();
  std::vector<data::Segment> segments = given ? *given_batch_ : loader_->next();
  const data::Batch global = data::pack(segments, {.seq_len = o.seq_len});
  const int64_t labels = global.num_label_tokens();
  std::optional<Bf16SwitchTraffic> traffic;
  if (bf16_) {
    traffic.emplace();
    send_bf16_parameters(*traffic);
  }
  ShardedState& computed = bf16_ ? compute_state_ : state_;  // whose gradients B computes
  double loss = 0;
  grad_sync_.start(computed, step_ + 1);
  try {
    // The step's totals on the device, read once in post: [0] squared gradient norm, [1] loss sum.
    const Tensor totals = Tensor::zeros(Shape{2}, DType::kFloat64, &compute_.allocator);
    runner_.run(computing(), computed, segments, labels,
                {.train = true,
                 .step = step_ + 1,
                 .layout = given ? std::optional(data::BatchLayout::kRows) : std::nullopt,
                 .loss_total = totals,
                 .loss_at = 1});
    loss = post(totals, traffic ? &*traffic : nullptr);
  } catch (...) {
    // The communication thread lets go of the state before anyone settles the step
    // (finish_interrupted_step); its running bucket ends within the communicators' timeout.
    grad_sync_.abandon();
    throw;
  }
  in_step_ = false;
  given_batch_.reset();

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
  m.bf16_switch = std::move(traffic);
  return m;
}

double DistTrainer::post(const Tensor& device_totals, Bf16SwitchTraffic* traffic) {
  const double start = tracer_.now_us();
  session_.wait_deferred();
  // Gradients in the optimizer-state layout (the sync's rest, then waiting for the communication
  // thread; under a bf16-only switch moved back to the base); squares of the elements this rank counts.
  std::vector<Tensor> synced = grad_sync_.finish();
  std::vector<Tensor> grads = traffic ? bring_back_gradients(synced, *traffic) : std::move(synced);
  // Summed on the device next to the losses and read with them: one host wait, not one per
  // gradient and micro-batch.
  for (size_t i = 0; i < state_.tensors.size(); ++i) {
    const TensorState& s = state_.tensors[i];
    if (counts_once(s.state_annotation, s.shape, rank_)) compute_.add_sum_squares(grads[i], device_totals);
  }
  const Tensor read = compute_.read_to_host(device_totals);
  // Kept until the update: if the totals reach another rank but not this one, it can still apply
  // the step after a failure (finish_interrupted_step).
  synced_grads_ = grads;
  std::vector<double> totals{read.element_as_double(0),
                             runner_.counts_loss(computing()) ? read.element_as_double(1) : 0.0};
  all_ranks_group()->allreduce({.data = comm::CommBuffer::of(totals)}).wait();
  if (commits_.step) commits_.step(step_ + 1, totals);  // before any weight changes anywhere
  apply_update(grads, totals, /*gather=*/true);
  synced_grads_.reset();
  compute_state_ = {};  // the bf16 copies live for one step
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
  for (size_t i = 0; i < state_.tensors.size(); ++i) {
    if (i == state_.tensors.size() / 2) fault_point(rank_, step_, "optimizer");  // half the weights updated
    TensorState& s = state_.tensors[i];
    pacer_.begin();  // the optimizer runs on the device
    kernels::AdamWOptions a{.lr = lr,
                            .beta1 = o.beta1,
                            .beta2 = o.beta2,
                            .eps = o.eps,
                            .weight_decay = s.decay ? o.weight_decay : 0.0,
                            .grad_scale = clip};
    if (s.state_annotation == s.annotation) {
      compute_.adamw_step(s.value, grads[i], s.exp_avg, s.exp_avg_sq, step_, a);
      pacer_.end();
      continue;
    }
    // ZeRO-1: update this rank's slice, then gather the parameter back from the state shards.
    Tensor slice = copy_out(s.value, s.region, s.state_region, allocator_.get());
    compute_.adamw_step(slice, grads[i], s.exp_avg, s.exp_avg_sq, step_, a);
    pacer_.end();
    if (!gather) {
      // On a GPU the slice goes back through the host (the CPU kernel cuts the box).
      const Tensor value = s.value.to_host();
      kernels::copy_region(slice.to_host(), std::vector<int64_t>(slice.shape().rank(), 0), value,
                           offsets_in(s.region, s.state_region), s.state_region.shape().dims());
      if (!value.shares_storage_with(s.value)) s.value.copy_from(value);
      continue;
    }
    pacer_.pad();
    const resolve::Resolution& r = cache_.resolve(s.state_annotation, s.annotation, s.shape, s.name);
    s.value.copy_from(execute_reshard_staged(r, s.shape, rank_, slice, session_, "post", *allocator_));
  }
  pacer_.pad();
}

double DistTrainer::run_passes(const std::vector<data::Segment>& segments, int64_t labels, bool train,
                               std::optional<data::BatchLayout> layout) {
  return runner_.run(*current_, state_, segments, labels, {.train = train, .step = step_ + 1, .layout = layout});
}

}  // namespace hspmd::runtime
