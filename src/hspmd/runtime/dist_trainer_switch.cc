#include "hspmd/runtime/dist_trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <sstream>

#include "hspmd/core/byte_size.h"
#include "hspmd/core/elapsed.h"
#include "hspmd/core/error.h"
#include "hspmd/kernels/cast.h"
#include "hspmd/runtime/fault_injection.h"
#include "hspmd/switching/switch_plan.h"

// DistTrainer (runtime/dist_trainer.h): graph switching (switch_to) and what elastic recovery
// adds to it (settling an interrupted step, restoring under a new plan, a joining worker's
// progress).
namespace hspmd::runtime {

using switching::StatePart;

namespace {

using Clock = std::chrono::steady_clock;

// Every rank learns whether all of them could take a step: `error` is this rank's reason not to
// (empty: fine). Returns "" when no rank objected, else the lowest objecting rank's reason,
// prefixed with that rank, identical on every rank.
std::string agree(comm::Communicator& world, int rank, const std::string& error) {
  std::vector<double> objections(world.ranks().size(), 0.0);
  objections[world.group_rank()] = error.empty() ? 0.0 : 1.0;
  world.allreduce({.data = comm::CommBuffer::of(objections)}).wait();
  const auto first = std::find(objections.begin(), objections.end(), 1.0);
  if (first == objections.end()) return "";
  const int root = world.ranks()[first - objections.begin()];
  constexpr size_t kMaxChars = 2048;
  std::vector<int32_t> text(kMaxChars, 0);
  if (root == rank) {
    for (size_t i = 0; i < error.size() && i < kMaxChars; ++i) text[i] = static_cast<unsigned char>(error[i]);
  }
  world.broadcast({.data = comm::CommBuffer::of(text), .root = root}).wait();
  std::string reason;
  for (int32_t c : text) {
    if (c == 0) break;
    reason.push_back(static_cast<char>(c));
  }
  return reason;
}

double max_over(comm::Communicator& world, double value) {
  std::vector<double> all(world.ranks().size(), 0.0);
  all[world.group_rank()] = value;
  world.allreduce({.data = comm::CommBuffer::of(all)}).wait();
  return *std::max_element(all.begin(), all.end());
}

// The bytes every rank put on the wire (peer -> bytes, this rank's share), summed over the world by
// the link tier between sender and receiver: what the switch measurably moved per tier, to set
// beside the plan's sent_by_tier. Without a topology every link is intra-node (as the planner has it).
std::map<resolve::LinkTier, int64_t> wire_bytes_by_tier(comm::Communicator& world, const std::map<int, int64_t>& sent_to,
                                                        const resolve::Topology* topology, int rank) {
  const std::vector<resolve::LinkTier> tiers = {resolve::LinkTier::kIntraNode, resolve::LinkTier::kInterNode};
  std::vector<int64_t> bytes(tiers.size(), 0);
  for (const auto& [peer, n] : sent_to) {
    const resolve::LinkTier tier = topology ? topology->tier(rank, peer) : resolve::LinkTier::kIntraNode;
    const auto at = std::find(tiers.begin(), tiers.end(), tier);
    HSPMD_CHECK(at != tiers.end()) << "switch: rank " << rank << " sent " << n << " bytes to peer " << peer
                                   << " over a " << resolve::link_tier_name(tier) << " link";
    bytes[at - tiers.begin()] += n;
  }
  world.allreduce({.data = comm::CommBuffer::of(bytes)}).wait();
  std::map<resolve::LinkTier, int64_t> out;
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (bytes[i] > 0) out[tiers[i]] = bytes[i];
  }
  return out;
}

}  // namespace

SwitchReport DistTrainer::switch_to(const sharding::AnnotationPlan& plan, const std::string& name,
                                    resolve::BsrAlgorithm algorithm,
                                    const std::vector<int>& dead) {
  if (!options_.bf16_switches) return switch_state_to(plan, name, algorithm, dead);
  HSPMD_CHECK(dead.empty()) << "bf16-only switches keep the master state under plan " << current_->name
                            << ": state from failed ranks moves with the full state (switch_state_to)";
  HSPMD_CHECK(algorithm == resolve::BsrAlgorithm::kFusedHeuristic)
      << "bf16-only switches run the fused BSR, not " << resolve::bsr_algorithm_name(algorithm);
  return switch_compute_to(plan, name);
}

SwitchReport DistTrainer::switch_state_to(const sharding::AnnotationPlan& plan, const std::string& name,
                                          resolve::BsrAlgorithm algorithm, const std::vector<int>& dead) {
  compute_state_ = {};  // a bf16 copy left by an interrupted step goes before the new state is allocated
  const auto start = Clock::now();
  const double trace_start = tracer_.now_us();
  session_.wait_deferred();
  auto world = all_ranks_group();
  SwitchReport report;
  report.from = current_->name;
  report.to = name;
  report.step = step_;

  // 1. Specialize (or find) the target plan; every rank must succeed before any byte moves.
  SpecializedPlan& next = switch_target(plan, name, *world, report.specialized);

  // 2. One fused BSR for every parameter and both moments, planned identically on every rank.
  const switching::SwitchPlan sp = plan_state_move(next, name, algorithm, dead);
  std::set<std::pair<int, int>> pairs;  // connect the BSR's pairs in one sorted order everywhere
  for (const resolve::BsrMessage& m : sp.bsr.messages()) pairs.insert(std::minmax(m.sender, m.receiver));
  for (const auto& [a, b] : pairs) {
    if (a == rank_ || b == rank_) session_.group({a, b}, "switch");
  }
  ShardedState moved = ShardedState::laid_out(next, graph_.params, rank_, optimizer_options(options_.train));
  StateTransfer transfer = state_transfer(sp, moved, !dead.empty());
  // A device rank whose communicators move host memory (Gloo; staging in comm_memory_) moves host
  // copies, as for its Reshards: the sources are copied out now and the new shards copied in once
  // the BSR is done; a kept shard (the source's own tensor) is neither. Over NCCL the BSR packs and
  // moves the device shards themselves.
  const bool staged = comm_memory_ != nullptr;
  StateTransfer on_device = transfer;  // handles: the device shards themselves
  if (staged) {
    for (LocalShard& source : transfer.sources) {
      if (source.tensor.defined()) source.tensor = source.tensor.clone(comm_memory_.get());
    }
    for (LocalShard& destination : transfer.destinations) {
      if (destination.tensor.defined()) {
        destination.tensor = Tensor::empty(destination.region.shape(), destination.tensor.dtype(), comm_memory_.get());
      }
    }
  }
  world->barrier().wait();  // the BSR's time is the transfer, not waiting for the last rank to plan
  fault_point(rank_, step_ + 1, "switch");
  const auto bsr_start = Clock::now();
  report.algorithm = resolve::bsr_algorithm_name(algorithm);
  std::map<int, int64_t> sent_to;  // peer -> bytes this rank put on the wire to it
  if (algorithm == resolve::BsrAlgorithm::kFusedHeuristic) {
    sent_to = execute_fused_bsr(sp.bsr, rank_, transfer.sources, transfer.destinations, session_, "switch");
  } else {
    for (size_t i = 0; i < sp.tensors.size(); ++i) {
      const resolve::FusedBsr one = resolve::plan_fused_bsr({sp.tensors[i]}, options_.topology,
                                                            resolve::bsr_algorithm_options(algorithm, dead));
      for (const auto& [peer, bytes] :
           execute_fused_bsr(one, rank_, {transfer.sources[i]}, {transfer.destinations[i]}, session_, "switch")) {
        sent_to[peer] += bytes;
      }
    }
  }
  if (staged) {
    for (size_t i = 0; i < transfer.destinations.size(); ++i) {
      Tensor shard = on_device.destinations[i].tensor;  // a handle; undefined: not this rank's
      if (shard.defined() && !shard.shares_storage_with(on_device.sources[i].tensor)) {
        shard.copy_from(transfer.destinations[i].tensor);
      }
    }
  }
  const double bsr_seconds = seconds_since(bsr_start);
  for (const auto& [peer, bytes] : sent_to) report.rank_sent_bytes += bytes;
  report.wire_by_tier = wire_bytes_by_tier(*world, sent_to, options_.topology, rank_);
  if (commits_.switch_done) commits_.switch_done();

  // 3. Hand over: the next step runs the new plan's graphs on the moved state, which is the base
  // of any later bf16-only switch (the moves planned from the old base no longer apply).
  state_ = std::move(moved);
  current_ = &next;
  bf16_.reset();
  report.sent_bytes = sp.bsr.total_bytes();
  report.local_copy_bytes = sp.local_copy_bytes;
  report.sent_by_tier = sp.sent_by_tier;
  report.sent_by_rank = sp.bsr.bytes_sent;
  report.messages = static_cast<int>(sp.bsr.messages().size());
  report.bsr_seconds = max_over(*world, bsr_seconds);
  report.total_seconds = max_over(*world, seconds_since(start));
  tracer_.record("switch to " + name, "switch", trace_start, tracer_.now_us());
  return report;
}

SpecializedPlan& DistTrainer::switch_target(const sharding::AnnotationPlan& plan, const std::string& name,
                                            comm::Communicator& world, bool& specialized) {
  const sharding::AnnotationPlan effective = plans_.effective(plan);
  SpecializedPlan* known = plans_.find(effective);
  std::unique_ptr<SpecializedPlan> built;
  std::string error;
  if (known == nullptr) {
    try {
      built = plans_.specialize(effective, name);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  const std::string refusal = agree(world, rank_, error);
  if (!refusal.empty()) {
    throw SwitchRefused("switch from plan " + current_->name + " to plan " + name +
                        " refused before any state moved: " + refusal);
  }
  specialized = built != nullptr;
  if (built) return plans_.keep(std::move(built), members_);
  plans_.connect(*known, members_);  // after a failure the groups are new (connects nothing otherwise)
  return *known;
}

switching::SwitchPlan DistTrainer::plan_state_move(const SpecializedPlan& next, const std::string& name,
                                                   resolve::BsrAlgorithm algorithm,
                                                   const std::vector<int>& dead) const {
  switching::SwitchOptions switch_options;
  switch_options.topology = options_.topology;
  switch_options.algorithm = algorithm;
  switch_options.dead = dead;
  // After a failure a ZeRO-1 gather may have been cut short: a parameter's up-to-date elements are
  // those of its optimizer-state layout, so only they are sent.
  std::vector<switching::ParamLayout> from = current_->param_layouts;
  if (!dead.empty()) {
    for (switching::ParamLayout& l : from) l.value = l.state;
  }
  try {
    return switching::plan_switch(from, next.param_layouts, switch_options);
  } catch (const Error& e) {
    if (dead.empty()) throw;
    throw StateLost("plan " + name + " cannot be assembled from the survivors: " + e.what());
  }
}

DistTrainer::StateTransfer DistTrainer::state_transfer(const switching::SwitchPlan& sp, ShardedState& moved,
                                                       bool after_failure) {
  StateTransfer t;
  t.sources.resize(sp.tensors.size());
  t.destinations.resize(sp.tensors.size());
  for (const TensorState& s : state_.tensors) {
    for (StatePart part : switching::kStateParts) {
      t.sources[sp.tensor_index(s.param, part)] = {s.part(part), s.region_of(part)};
    }
    // After a failure the value's up-to-date elements are its optimizer-state slice (plan_state_move).
    if (after_failure && s.region != s.state_region) {
      t.sources[sp.tensor_index(s.param, StatePart::kValue)] = {
          copy_out(s.value, s.region, s.state_region, allocator_.get()), s.state_region};
    }
  }
  // A shard this rank keeps unchanged is not copied: the new state is the old tensor (every piece
  // of it comes from this rank's own source, so the BSR never writes into it).
  auto kept_or_new = [&](const LocalShard& source, const sharding::Region& region) {
    if (source.tensor.defined() && source.region == region) return source.tensor;
    return Tensor::empty(region.shape(), DType::kFloat32, allocator_.get());
  };
  for (TensorState& s : moved.tensors) {
    for (StatePart part : switching::kStateParts) {
      const size_t i = sp.tensor_index(s.param, part);
      s.part(part) = kept_or_new(t.sources[i], s.region_of(part));
      t.destinations[i] = {s.part(part), s.region_of(part)};
    }
  }
  return t;
}

SwitchReport DistTrainer::switch_compute_to(const sharding::AnnotationPlan& plan, const std::string& name) {
  const auto start = Clock::now();
  session_.wait_deferred();
  auto world = all_ranks_group();
  SwitchReport report;
  report.from = computing().name;
  report.to = name;
  report.step = step_;
  report.bf16_only = true;
  report.base = current_->name;
  SpecializedPlan& next = switch_target(plan, name, *world, report.specialized);
  if (&next == current_) {
    bf16_.reset();  // back to the base: its steps run on the master state itself
  } else {
    switching::Bf16SwitchPlan moves = switching::plan_bf16_switch(current_->param_layouts, next.param_layouts,
                                                                  options_.topology);
    std::set<std::pair<int, int>> pairs;  // connected in one sorted order everywhere, as for a full switch
    for (const switching::SwitchPlan* sp : {&moves.params_out, &moves.grads_back}) {
      for (const resolve::BsrMessage& m : sp->bsr.messages()) pairs.insert(std::minmax(m.sender, m.receiver));
    }
    for (const auto& [a, b] : pairs) {
      if (a == rank_ || b == rank_) session_.group({a, b}, "switch");
    }
    report.params_out_bytes = moves.params_out.bsr.total_bytes();
    report.grads_back_bytes = moves.grads_back.bsr.total_bytes();
    bf16_ = Bf16Compute{&next, std::move(moves)};
  }
  report.total_seconds = max_over(*world, seconds_since(start));
  return report;
}

namespace {

// `t` (a host tensor) converted to `dtype` (rounding to nearest even into bf16; bf16 to float32 is
// exact) by the CPU kernel, in `memory` (a host allocator; null: the process's).
Tensor converted(const Tensor& t, DType dtype, Allocator* memory) {
  Tensor out = Tensor::empty(t.shape(), dtype, memory);
  kernels::cast(t, out);
  return out;
}

// `t` in `memory`'s device, copied only when it is on another.
Tensor in_memory(const Tensor& t, Allocator* memory) {
  return t.device() == memory->device() ? t : t.clone(memory);
}

// Where a bf16-only switch's moves keep their tensors: `wire`, the BSR's buffers (a host rank's
// memory; a GPU rank's host staging when its communicators move host memory, its device memory
// when they move the device's), and `host`, the host casts' outputs (null: the process's memory).
struct Bf16MoveMemory {
  Allocator* wire;
  Allocator* host;
};

Bf16MoveMemory bf16_move_memory(Allocator& rank_memory, Allocator* staging) {
  if (staging != nullptr) return {staging, staging};
  return {&rank_memory, rank_memory.device().type == DeviceType::kCPU ? &rank_memory : nullptr};
}

}  // namespace

void DistTrainer::send_bf16_parameters(Bf16SwitchTraffic& traffic) {
  const switching::SwitchPlan& sp = bf16_->moves.params_out;
  const Bf16MoveMemory memory = bf16_move_memory(*allocator_, comm_memory_.get());
  std::vector<LocalShard> sources(sp.tensors.size()), destinations(sp.tensors.size());
  for (const TensorState& s : state_.tensors) {
    sources[sp.tensor_index(s.param, StatePart::kValue)] = {
        in_memory(converted(s.value.to_host(), DType::kBFloat16, memory.host), memory.wire), s.region};
  }
  compute_state_ = ShardedState::laid_out(*bf16_->plan, graph_.params, rank_, optimizer_options(options_.train));
  for (const TensorState& s : compute_state_.tensors) {
    destinations[sp.tensor_index(s.param, StatePart::kValue)] = {
        Tensor::empty(s.region.shape(), DType::kBFloat16, memory.wire), s.region};
  }
  auto world = all_ranks_group();
  world->barrier().wait();  // the time is the transfer's, not waiting for the last rank (as switch_to)
  const auto start = Clock::now();
  const std::map<int, int64_t> sent_to = execute_fused_bsr(sp.bsr, rank_, sources, destinations, session_, "switch");
  traffic.params_out_seconds = max_over(*world, seconds_since(start));
  sources.clear();
  // The kernels read float32 parameters: a bf16 value is exact in float32, and every matmul and
  // attention of a bf16 run rounds its operands to bf16 anyway.
  for (TensorState& s : compute_state_.tensors) {
    const Tensor& bf16 = destinations[sp.tensor_index(s.param, StatePart::kValue)].tensor;
    s.value = in_memory(converted(bf16.to_host(), DType::kFloat32, memory.host), allocator_.get());
  }
  traffic.plan = bf16_->plan->name;
  traffic.base = current_->name;
  traffic.params_out_by_tier = sp.sent_by_tier;
  traffic.params_out_wire_by_tier = wire_bytes_by_tier(*world, sent_to, options_.topology, rank_);
}

std::vector<Tensor> DistTrainer::bring_back_gradients(const std::vector<Tensor>& synced,
                                                      Bf16SwitchTraffic& traffic) {
  const switching::SwitchPlan& sp = bf16_->moves.grads_back;
  const Bf16MoveMemory memory = bf16_move_memory(*allocator_, comm_memory_.get());
  std::vector<LocalShard> sources(sp.tensors.size()), destinations(sp.tensors.size());
  HSPMD_ASSERT(synced.size() == compute_state_.tensors.size())
      << "rank " << rank_ << ": " << synced.size() << " synced gradients for " << compute_state_.tensors.size()
      << " parameters under plan " << bf16_->plan->name;
  for (size_t i = 0; i < synced.size(); ++i) {
    const TensorState& s = compute_state_.tensors[i];
    sources[sp.tensor_index(s.param, StatePart::kValue)] = {in_memory(synced[i], memory.wire), s.state_region};
  }
  for (const TensorState& s : state_.tensors) {
    destinations[sp.tensor_index(s.param, StatePart::kValue)] = {
        Tensor::empty(s.state_region.shape(), DType::kFloat32, memory.wire), s.state_region};
  }
  session_.wait_deferred();
  auto world = all_ranks_group();
  world->barrier().wait();  // a stage that finished its backward early waits here, not in the timed BSR
  const auto start = Clock::now();
  const std::map<int, int64_t> sent_to = execute_fused_bsr(sp.bsr, rank_, sources, destinations, session_, "switch");
  traffic.grads_back_seconds = max_over(*world, seconds_since(start));
  std::vector<Tensor> grads;
  grads.reserve(state_.tensors.size());
  for (const TensorState& s : state_.tensors) {
    const Tensor& g = destinations[sp.tensor_index(s.param, StatePart::kValue)].tensor;
    grads.push_back(in_memory(g, allocator_.get()));
  }
  traffic.grads_back_by_tier = sp.sent_by_tier;
  traffic.grads_back_wire_by_tier = wire_bytes_by_tier(*world, sent_to, options_.topology, rank_);
  return grads;
}

InterruptedStep DistTrainer::finish_interrupted_step(const std::vector<int>& members,
                                                    const std::optional<std::vector<double>>& committed) {
  HSPMD_CHECK(std::binary_search(members.begin(), members.end(), rank_))
      << "rank " << rank_ << " is not among the survivors [" << comm::group_key(members) << "]";
  members_ = members;
  try {
    session_.wait_deferred();  // aborted: they fail at once
  } catch (const Error&) {
  }
  for (TensorState& s : state_.tensors) s.grad = s.grad_shard = Tensor();
  // A step under a bf16-only switch computed on bf16 copies laid out under bf16_->plan: they and
  // the gradients they hold go (the recovery's full switch then computes under the new base).
  compute_state_ = {};
  InterruptedStep out;
  out.in_progress = in_step_;
  if (committed) {
    // Some rank had the global totals and may have updated its weights: every survivor applies the
    // step. Reaching the totals means every rank had finished its gradient sync, and under a
    // bf16-only switch its grads-back move too (post() sums the totals over the gradients moved
    // back): synced_grads_ are in the base's optimizer-state layout, where AdamW steps.
    HSPMD_CHECK(committed->size() == 2) << "rank " << rank_ << ": malformed committed totals of step " << step_ + 1;
    HSPMD_CHECK(synced_grads_.has_value())
        << "rank " << rank_ << ": step " << step_ + 1 << " was committed but this rank has no synced gradients";
    apply_update(*synced_grads_, *committed, /*gather=*/false);
    out.rolled_forward = true;
    out.metrics.step = step_;
    out.metrics.loss = (*committed)[1];
    out.metrics.lr = lr_schedule_.at(step_);
    out.metrics.grad_norm = last_grad_norm_;
  } else if (in_step_) {
    reset_loader(step_start_);  // redo the same batch (a given batch is still held)
  }
  synced_grads_.reset();
  in_step_ = false;
  return out;
}

void DistTrainer::adopt_progress(int64_t step, const data::LoaderState& loader) {
  HSPMD_CHECK(state_.tensors.empty()) << "rank " << rank_ << " holds state; only a spare can adopt a run's progress";
  step_ = step;
  reset_loader(loader);
}

void DistTrainer::restore_under(const sharding::AnnotationPlan& plan, const std::string& name,
                                const std::string& dir) {
  SpecializedPlan& next = plans_.find_or_build(plan, name, members_);
  state_ = {};  // the old state goes before the new is allocated
  compute_state_ = {};
  state_ = ShardedState::laid_out(next, graph_.params, rank_, optimizer_options(options_.train));
  state_.zero(allocator_.get());
  current_ = &next;
  bf16_.reset();  // `plan` is the base now
  restore(dir);
}

nlohmann::json SwitchReport::to_json() const {
  nlohmann::json tiers = nlohmann::json::object();
  for (const auto& [tier, bytes] : sent_by_tier) tiers[resolve::link_tier_name(tier)] = bytes;
  nlohmann::json wire = nlohmann::json::object();
  for (const auto& [tier, bytes] : wire_by_tier) wire[resolve::link_tier_name(tier)] = bytes;
  nlohmann::json ranks = nlohmann::json::object();
  for (const auto& [rank, bytes] : sent_by_rank) ranks[std::to_string(rank)] = bytes;
  return {{"event", "switch"},       {"step", step},
          {"from", from},            {"to", to},
          {"specialized", specialized}, {"sent_bytes", sent_bytes},
          {"sent_bytes_by_tier", tiers}, {"wire_bytes_by_tier", wire}, {"sent_bytes_by_rank", ranks},
          {"local_copy_bytes", local_copy_bytes}, {"messages", messages}, {"algorithm", algorithm},
          {"bsr_seconds", bsr_seconds}, {"total_seconds", total_seconds},
          {"states", bf16_only ? "bf16-params" : "params+adam"}, {"base", base},
          {"params_out_bytes", params_out_bytes}, {"grads_back_bytes", grads_back_bytes}};
}

std::string SwitchReport::to_string() const {
  std::ostringstream out;
  if (bf16_only) {
    out << "switch after step " << step << ": plan " << from << " -> " << to << " ("
        << (specialized ? "specialized now" : "cached graphs") << "), bf16 only: weights and Adam moments stay under plan "
        << base;
    if (to == base) {
      out << "; steps compute on them again";
    } else {
      out << "; each step under " << to << " sends bf16 parameters " << format_bytes(params_out_bytes) << " ("
          << params_out_bytes << " bytes) out and float32 gradients " << format_bytes(grads_back_bytes) << " ("
          << grads_back_bytes << " bytes) back";
    }
    char time[48];
    std::snprintf(time, sizeof time, "; switch %.3fs", total_seconds);
    return out.str() + time;
  }
  out << "switch after step " << step << ": plan " << from << " -> " << to << " ("
      << (specialized ? "specialized now" : "cached graphs") << "), "
      << (algorithm == "fused" ? std::string("one fused BSR") : "BSR " + algorithm) << ": " << messages
      << " messages, sent "
      << format_bytes(sent_bytes);
  for (const auto& [tier, bytes] : sent_by_tier) {
    out << " [" << resolve::link_tier_name(tier) << " " << format_bytes(bytes) << "]";
  }
  int64_t on_wire = 0;
  for (const auto& [tier, bytes] : wire_by_tier) on_wire += bytes;
  out << ", on the wire " << format_bytes(on_wire);
  for (const auto& [tier, bytes] : wire_by_tier) {
    out << " [" << resolve::link_tier_name(tier) << " " << bytes << " bytes]";
  }
  char times[96];
  std::snprintf(times, sizeof times, ", local copies %s; BSR %.3fs, switch %.3fs",
                format_bytes(local_copy_bytes).c_str(), bsr_seconds, total_seconds);
  out << times;
  return out.str();
}

}  // namespace hspmd::runtime
