#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/runtime/dist_trainer_parts.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

#include "hspmd/core/byte_size.h"
#include "hspmd/core/error.h"
#include "hspmd/runtime/fault_injection.h"
#include "hspmd/switching/switch_plan.h"

// DistTrainer (runtime/dist_trainer.h): graph switching (switch_to) and what elastic recovery
// adds to it (settling an interrupted step, restoring under a new plan, a joining worker's
// progress).
namespace hspmd::runtime {

using namespace dist_detail;

namespace {

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

}  // namespace

SwitchReport DistTrainer::switch_to(const sharding::AnnotationPlan& plan, const std::string& name,
                                    resolve::BsrAlgorithm algorithm,
                                    const std::vector<int>& dead) {
  const auto start = Clock::now();
  const double trace_start = tracer_.now_us();
  session_.wait_deferred();
  auto world = all_ranks_group();
  SwitchReport report;
  report.from = current_->name;
  report.to = name;
  report.step = step_;

  // 1. Specialize (or find) the target plan; every rank must succeed before any byte moves.
  const sharding::AnnotationPlan effective = effective_plan(plan);
  PlanRuntime* next = find_plan(effective);
  std::unique_ptr<PlanRuntime> built;
  std::string error;
  if (next == nullptr) {
    try {
      built = specialize_plan(effective, name);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  const std::string refusal = agree(*world, rank_, error);
  if (!refusal.empty()) {
    throw SwitchRefused("switch from plan " + current_->name + " to plan " + name +
                        " refused before any state moved: " + refusal);
  }
  report.specialized = built != nullptr;
  if (built) {
    next = &keep_plan(std::move(built));
  } else {
    connect(*next);  // after a failure the groups are new (connects nothing otherwise)
  }

  // 2. One fused BSR for every parameter and both moments, planned identically on every rank.
  switching::SwitchOptions switch_options;
  switch_options.topology = options_.topology;
  switch_options.algorithm = algorithm;
  switch_options.dead = dead;
  // After a failure a ZeRO-1 gather may have been cut short: a parameter's up-to-date elements are
  // those of its optimizer-state layout, so only they are sent.
  std::vector<switching::ParamLayout> from = current_->layouts;
  if (!dead.empty()) {
    for (switching::ParamLayout& l : from) l.value = l.state;
  }
  switching::SwitchPlan sp;
  try {
    sp = switching::plan_switch(from, next->layouts, switch_options);
  } catch (const Error& e) {
    if (dead.empty()) throw;
    throw StateLost("plan " + name + " cannot be assembled from the survivors: " + e.what());
  }
  std::set<std::pair<int, int>> pairs;  // connect the BSR's pairs in one sorted order everywhere
  for (const resolve::BsrMessage& m : sp.bsr.messages()) pairs.insert(std::minmax(m.sender, m.receiver));
  for (const auto& [a, b] : pairs) {
    if (a == rank_ || b == rank_) session_.group({a, b}, "switch");
  }
  std::vector<ParamState> moved = param_states(*next);
  std::vector<LocalShard> sources(sp.tensors.size()), destinations(sp.tensors.size());
  for (const ParamState& s : params_) {
    sources[3 * s.index] = dead.empty() || s.region == s.state_region
                               ? LocalShard{s.value, s.region}
                               : LocalShard{copy_out(s.value, s.region, s.state_region, allocator_.get()), s.state_region};
    sources[3 * s.index + 1] = {s.exp_avg, s.state_region};
    sources[3 * s.index + 2] = {s.exp_avg_sq, s.state_region};
  }
  // A shard this rank keeps unchanged is not copied: the new state is the old tensor (every piece
  // of it comes from this rank's own source, so the BSR never writes into it).
  auto kept_or_new = [&](const LocalShard& source, const sharding::Region& region) {
    if (source.tensor.defined() && source.region == region) return source.tensor;
    return Tensor::empty(region.shape(), DType::kFloat32, allocator_.get());
  };
  for (ParamState& s : moved) {
    s.value = kept_or_new(sources[3 * s.index], s.region);
    s.exp_avg = kept_or_new(sources[3 * s.index + 1], s.state_region);
    s.exp_avg_sq = kept_or_new(sources[3 * s.index + 2], s.state_region);
    destinations[3 * s.index] = {s.value, s.region};
    destinations[3 * s.index + 1] = {s.exp_avg, s.state_region};
    destinations[3 * s.index + 2] = {s.exp_avg_sq, s.state_region};
  }
  world->barrier().wait();  // the BSR's time is the transfer, not waiting for the last rank to plan
  fault_point(rank_, step_ + 1, "switch");
  const auto bsr_start = Clock::now();
  report.algorithm = resolve::bsr_algorithm_name(algorithm);
  if (algorithm == resolve::BsrAlgorithm::kFusedHeuristic) {
    report.rank_sent_bytes = execute_fused_bsr(sp.bsr, rank_, sources, destinations, session_, "switch");
  } else {
    for (size_t i = 0; i < sp.tensors.size(); ++i) {
      const resolve::FusedBsr one = resolve::plan_fused_bsr({sp.tensors[i]}, options_.topology,
                                                            resolve::bsr_algorithm_options(algorithm, dead));
      report.rank_sent_bytes += execute_fused_bsr(one, rank_, {sources[i]}, {destinations[i]}, session_, "switch");
    }
  }
  const double bsr_seconds = seconds_since(bsr_start);
  if (commits_.switch_done) commits_.switch_done();

  // 3. Hand over: the next step runs the new plan's graphs on the moved state.
  params_ = std::move(moved);
  current_ = next;
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

InterruptedStep DistTrainer::finish_interrupted_step(const std::vector<int>& members,
                                                    const std::optional<std::vector<double>>& committed) {
  HSPMD_CHECK(std::binary_search(members.begin(), members.end(), rank_))
      << "rank " << rank_ << " is not among the survivors [" << comm::group_key(members) << "]";
  members_ = members;
  try {
    session_.wait_deferred();  // aborted: they fail at once
  } catch (const Error&) {
  }
  for (ParamState& s : params_) s.grad = Tensor();
  InterruptedStep out;
  out.in_progress = in_step_;
  if (committed) {
    // Some rank had the global totals and may have updated its weights: every survivor applies the
    // step. Reaching the totals means every rank had finished its gradient sync.
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
    loader_ = std::make_unique<data::Loader>(*dataset_, loader_->options(), step_start_);  // redo the same batch
  }
  synced_grads_.reset();
  in_step_ = false;
  return out;
}

void DistTrainer::adopt_progress(int64_t step, const data::LoaderState& loader) {
  HSPMD_CHECK(params_.empty()) << "rank " << rank_ << " holds state; only a spare can adopt a run's progress";
  step_ = step;
  loader_ = std::make_unique<data::Loader>(*dataset_, loader_->options(), loader);
}

void DistTrainer::restore_under(const sharding::AnnotationPlan& plan, const std::string& name,
                                const std::string& dir) {
  const sharding::AnnotationPlan effective = effective_plan(plan);
  PlanRuntime* next = find_plan(effective);
  if (next == nullptr) {
    next = &keep_plan(specialize_plan(effective, name));
  } else {
    connect(*next);
  }
  params_.clear();  // the old state goes before the new is allocated
  params_ = param_states(*next);
  for (ParamState& s : params_) {
    s.value = Tensor::zeros(s.region.shape(), DType::kFloat32, allocator_.get());
    s.exp_avg = Tensor::zeros(s.state_region.shape(), DType::kFloat32, allocator_.get());
    s.exp_avg_sq = Tensor::zeros(s.state_region.shape(), DType::kFloat32, allocator_.get());
  }
  current_ = next;
  restore(dir);
}

nlohmann::json SwitchReport::to_json() const {
  nlohmann::json tiers = nlohmann::json::object();
  for (const auto& [tier, bytes] : sent_by_tier) tiers[resolve::link_tier_name(tier)] = bytes;
  nlohmann::json ranks = nlohmann::json::object();
  for (const auto& [rank, bytes] : sent_by_rank) ranks[std::to_string(rank)] = bytes;
  return {{"event", "switch"},       {"step", step},
          {"from", from},            {"to", to},
          {"specialized", specialized}, {"sent_bytes", sent_bytes},
          {"sent_bytes_by_tier", tiers}, {"sent_bytes_by_rank", ranks},
          {"local_copy_bytes", local_copy_bytes}, {"messages", messages}, {"algorithm", algorithm},
          {"bsr_seconds", bsr_seconds}, {"total_seconds", total_seconds}};
}

std::string SwitchReport::to_string() const {
  std::ostringstream out;
  out << "switch after step " << step << ": plan " << from << " -> " << to << " ("
      << (specialized ? "specialized now" : "cached graphs") << "), "
      << (algorithm == "fused" ? std::string("one fused BSR") : "BSR " + algorithm) << ": " << messages
      << " messages, sent "
      << format_bytes(sent_bytes);
  for (const auto& [tier, bytes] : sent_by_tier) {
    out << " [" << resolve::link_tier_name(tier) << " " << format_bytes(bytes) << "]";
  }
  char times[96];
  std::snprintf(times, sizeof times, ", local copies %s; BSR %.3fs, switch %.3fs",
                format_bytes(local_copy_bytes).c_str(), bsr_seconds, total_seconds);
  out << times;
  return out.str();
}

}  // namespace hspmd::runtime
