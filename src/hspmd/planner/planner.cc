#include "hspmd/planner/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "hspmd/core/byte_size.h"
#include "hspmd/core/elapsed.h"
#include "hspmd/core/error.h"
#include "hspmd/planner/layer_programs.h"
#include "hspmd/planner/pipeline_search.h"
#include "hspmd/specialize/schedule.h"

namespace hspmd::planner {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string join_ranks(const std::vector<int>& ranks) {
  std::ostringstream s;
  for (size_t i = 0; i < ranks.size(); ++i) s << (i ? "," : "") << ranks[i];
  return s.str();
}

// " (sequence parallelism, ZeRO-2 and ZeRO-3 tried too)": what the search tightened to when memory bound.
std::string tried_settings(const PlannerOptions& o) {
  std::vector<std::string> tried;
  if (o.sequence_parallel) tried.push_back("sequence parallelism");
  if (o.zero2 || o.zero3) tried.push_back("ZeRO-2");
  if (o.zero3) tried.push_back("ZeRO-3");
  std::string s;
  for (size_t i = 0; i < tried.size(); ++i) s += (i == 0 ? "" : i + 1 == tried.size() ? " and " : ", ") + tried[i];
  return s.empty() ? s : " (" + s + " tried too)";
}

// Whether the runtime runs `st` under ZeRO-3: every pipeline runs as many micro-batches
// (sharding::Strategy::validate), and every holder of a parameter runs its passes in one order under
// `schedule` (specialize::check_passes_in_lockstep): the stages holding a layer, the first stages
// (the embedding), the last (the head), and both together when the two are tied. GPipe always
// does; 1F1B when each layer sits equally far from the ends of its pipelines (or the warm-ups cover
// every micro-batch). Pipelines may otherwise differ in stages, layer splits, TP and CP degrees.
bool zero3_runs(const sharding::Strategy& st, specialize::ScheduleKind schedule, const ModelShape& shape) {
  const int n = st.pipelines.front().num_micro_batches;
  for (const sharding::PipelineSpec& pipe : st.pipelines) {
    if (pipe.num_micro_batches != n) return false;
  }
  // Each (stages, stage) position's pass order, numbered so that equal orders share a number.
  std::map<std::pair<int, int>, int> order_of;
  std::vector<std::vector<specialize::Task>> orders;
  auto order = [&](size_t p, int j) {
    const int S = static_cast<int>(st.pipelines[p].stages.size());
    auto [it, added] = order_of.try_emplace({S, j}, 0);
    if (added) {
      std::vector<specialize::Task> passes = specialize::make_schedule(schedule, n, S, j);
      const auto same = std::find(orders.begin(), orders.end(), passes);
      it->second = static_cast<int>(same - orders.begin());
      if (same == orders.end()) orders.push_back(std::move(passes));
    }
    return it->second;
  };
  // Whether the holders (the stages holders(p) of each pipeline p) run their passes in one order.
  auto one_order = [&](const std::function<std::vector<int>(size_t p)>& holders) {
    int first = -1;
    for (size_t p = 0; p < st.pipelines.size(); ++p) {
      for (int j : holders(p)) {
        const int o = order(p, j);
        if (first < 0) first = o;
        if (o != first) return false;
      }
    }
    return true;
  };
  auto last = [&](size_t p) { return static_cast<int>(st.pipelines[p].stages.size()) - 1; };
  const bool ends = one_order([&](size_t p) {
    return shape.tied_embeddings ? std::vector<int>{0, last(p)} : std::vector<int>{0};
  }) && one_order([&](size_t p) { return std::vector<int>{last(p)}; });
  if (!ends) return false;
  for (int layer = 0; layer < static_cast<int>(shape.layers); ++layer) {
    const bool ok = one_order([&](size_t p) {
      const std::vector<sharding::StageSpec>& stages = st.pipelines[p].stages;
      int j = 0;
      while (stages[j].last_layer < layer) ++j;
      return std::vector<int>{j};
    });
    if (!ok) return false;
  }
  return true;
}

// `st` with sequence parallelism on every stage where it applies, or off everywhere.
sharding::Strategy with_sequence_parallel(sharding::Strategy st, bool on) {
  for (sharding::PipelineSpec& pipe : st.pipelines) {
    for (sharding::StageSpec& s : pipe.stages) {
      s.sequence_parallel = on && s.tp() > 1;  // rows of any length: padded to the t x c ranks
    }
  }
  return st;
}

}  // namespace

std::vector<int> searched_cp_degrees(const PlannerOptions& options) {
  if (!options.cp_degrees.empty()) return options.cp_degrees;
  if (options.seq_len >= kLongSequenceTokens) return {1, 2, 4, 8};
  return {1};
}

Planner::Planner(const models::Model& model, const resolve::Topology& topology, const Profile& profile,
                 PlannerOptions options)
    : topology_(topology),
      profile_(profile),
      options_(std::move(options)),
      cost_(model, topology, profile,
            {.seq_len = options_.seq_len, .schedule = options_.schedule, .grad_bucket_mb = options_.grad_bucket_mb}) {
  // SP never prices a layer slower and never needs more memory, so one search with SP's memory finds
  // every plan a search without it would (each solution is then priced with SP off too, and SP kept
  // only where it is needed to fit or faster): no second search for it when memory binds.
  if (options_.search_sequence_parallel) options_.sequence_parallel = true;
  HSPMD_CHECK(options_.global_batch > 0) << "planner: the global batch must be positive, got " << options_.global_batch;
  for (int b : options_.micro_batch_sizes) {
    HSPMD_CHECK(b > 0 && options_.global_batch % b == 0)
        << "planner: micro-batch size " << b << " does not divide the global batch " << options_.global_batch;
  }
  for (int c : options_.cp_degrees) {
    HSPMD_CHECK(c > 0) << "planner: context-parallel degree " << c << " must be positive";
  }
  for (int r : options_.devices) {
    HSPMD_CHECK(r >= 0 && r < topology_.num_devices())
        << "planner: rank " << r << " is not in cluster " << topology_.name() << " (" << topology_.num_devices()
        << " devices)";
  }
}

double Planner::moved_bytes(const sharding::Strategy& previous, const sharding::Strategy& next) const {
  // Where each rank was: its layers (with -1 for the embedding, L for the head) and TP degree.
  std::map<int, std::pair<std::set<int>, int>> held;
  const int L = static_cast<int>(cost_.shape().layers);
  for (const auto& pipe : previous.pipelines) {
    for (size_t j = 0; j < pipe.stages.size(); ++j) {
      const auto& s = pipe.stages[j];
      for (int r : s.ranks) {
        auto& [layers, tp] = held[r];
        tp = s.tp();
        for (int l = s.first_layer; l <= s.last_layer; ++l) layers.insert(l);
        if (j == 0) layers.insert(-1);
        if (j + 1 == pipe.stages.size()) layers.insert(L);
      }
    }
  }
  const int D = static_cast<int>(next.pipelines.size());
  double moved = 0;
  for (const auto& pipe : next.pipelines) {
    for (size_t j = 0; j < pipe.stages.size(); ++j) {
      const auto& s = pipe.stages[j];
      const DeviceKindProfile& k = profile_.kind(cost_.stage_kind(s.ranks, s.tp()));
      const double per_param = k.bytes_per_parameter + k.zero_bytes_per_parameter / (next.shards_optimizer_states() ? D : 1);
      std::vector<std::pair<int, double>> parts;
      for (int l = s.first_layer; l <= s.last_layer; ++l) parts.push_back({l, cost_.shape().layer_parameters});
      if (j == 0) parts.push_back({-1, cost_.shape().embedding_parameters});
      if (j + 1 == pipe.stages.size()) parts.push_back({L, cost_.shape().head_parameters});
      for (int r : s.ranks) {
        auto it = held.find(r);
        for (const auto& [l, params] : parts) {
          const bool kept = it != held.end() && it->second.second == s.tp() && it->second.first.count(l);
          if (!kept) moved += params / s.tp() * per_param;
        }
      }
    }
  }
  return moved;
}

std::optional<PlannerOptions> Planner::tighter() const {
  PlannerOptions next = options_;
  if (options_.zero1 && options_.zero2_when_tight && !options_.zero2 && !options_.zero3) {
    next.zero2 = true;
  } else if (options_.zero1 && options_.zero3_when_tight && !options_.zero3) {
    next.zero2 = false;
    next.zero3 = true;
  } else {
    return std::nullopt;
  }
  return next;
}

Plan Planner::run(const std::vector<int>& available, const sharding::Strategy* previous, double prune_at,
                  std::shared_ptr<LayerProgramsShared> shared) const {
  const auto start = std::chrono::steady_clock::now();
  PipelineSearch search(cost_, options_, available);
  LayerPrograms programs(cost_, options_, std::move(shared));
  programs.ring_bound = ring_link_bound(cost_, available);
  for (const auto& [kind, t] : options_.tp_per_kind) search.keep_tp[kind] = {t};
  if (previous) {
    for (const auto& pipe : previous->pipelines) {
      search.keep_micro_batch_sizes.push_back(pipe.micro_batch_size);
      for (const auto& s : pipe.stages) {
        for (int r : s.ranks) {
          if (r < topology_.num_devices()) search.keep_tp[topology_.device(r).type].insert(s.tp());
        }
      }
    }
    auto& sizes = search.keep_micro_batch_sizes;
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    std::erase_if(sizes, [&](int b) { return options_.global_batch % b != 0; });
  }
  Plan best;
  best.prediction.step_seconds = kInf;
  // Below this, what memory kept out might be faster: a plan that did not fit, or a configuration
  // or shape dropped for memory.
  double memory_dropped = kInf;
  auto threshold = [&] { return std::min(best.prediction.step_seconds, prune_at); };
  struct Found {
    sharding::Strategy strategy;
    Prediction prediction;
  };
  std::vector<Found> found;
  const double slack = previous ? 1 + options_.replan_tolerance : 1;
  int solved = 0, floor_skipped = 0;
  auto progress = [&] {
    PlanningProgress p;
    p.elapsed_seconds = seconds_since(start);
    p.time_limit_seconds = options_.time_limit_seconds;
    p.cuts = search.cuts();
    p.shapes = search.shapes();
    p.candidates = search.generated();
    p.solved = solved;
    p.milps = programs.milps();
    p.relaxation_pruned = programs.relaxation_pruned();
    p.floor_skipped = floor_skipped;
    p.best_step_seconds = best.prediction.step_seconds;
    p.lowest_bound_seconds = search.lowest_bound();
    return p;
  };
  double next_report = options_.progress_interval_seconds;
  while (std::optional<Candidate> c = search.next(threshold() * slack)) {
    // With a plan in hand (this search's, or the caller's below which it searches), stop at the limit.
    if (options_.time_limit_seconds > 0 && std::min(best.prediction.step_seconds, prune_at) < kInf &&
        seconds_since(start) >= options_.time_limit_seconds) {
      best.complete = false;
      best.lowest_bound_left = c->bound;
      break;
    }
    if (options_.progress && seconds_since(start) >= next_report) {
      options_.progress(progress());
      next_report = seconds_since(start) + options_.progress_interval_seconds;
    }
    ++solved;
    std::optional<sharding::Strategy> st = programs.solve(*c, threshold() * slack);
    if (!st) continue;
    if (st->shards_parameters() && !zero3_runs(*st, options_.schedule, cost_.shape())) continue;
    // Pricing a strategy of a thousand ranks is most of a large search's time: not when its floor
    // shows it slower than the best, unless memory's bookkeeping needs to know whether it fits (one
    // that does not lowers memory_dropped to its bound: no change once that is at or below it).
    const double dropped_so_far = std::min(
        {memory_dropped, search.lowest_memory_dropped_bound(), programs.lowest_memory_dropped_bound()});
    if (programs.solution_floor() > threshold() * slack && dropped_so_far <= c->bound) {
      ++floor_skipped;
      continue;
    }
    // With and without sequence parallelism on its TP stages: with it only where it fits when the
    // other does not, or is faster.
    Prediction p = cost_.predict(*st);
    const sharding::Strategy twin = with_sequence_parallel(*st, !options_.sequence_parallel);
    if (options_.search_sequence_parallel && twin.pipelines != st->pipelines) {
      Prediction q = cost_.predict(twin);
      const bool twin_has_sp = !options_.sequence_parallel;
      const bool twin_wins = twin_has_sp ? q.fits && (!p.fits || q.step_seconds < p.step_seconds)
                                         : q.fits && (!p.fits || q.step_seconds <= p.step_seconds);
      if (twin_wins) {
        *st = twin;
        p = std::move(q);
      }
    }
    if (!p.fits) {
      memory_dropped = std::min(memory_dropped, c->bound);
      continue;
    }
    if (p.step_seconds < best.prediction.step_seconds) {
      best.strategy = *st;
      best.prediction = p;
    }
    if (previous) found.push_back({std::move(*st), std::move(p)});
  }
  memory_dropped = std::min({memory_dropped, search.lowest_memory_dropped_bound(), programs.lowest_memory_dropped_bound()});
  // Memory bound the search: with less memory needed (ZeRO-2, then ZeRO-3, each slower or
  // no faster) a plan may fit, or beat the best found, so search again below the best. Not after the
  // time limit cut this search short, and when re-planning only if nothing fit (its choice by moved
  // state is among one setting's plans).
  const double time_left =
      options_.time_limit_seconds > 0 ? options_.time_limit_seconds - seconds_since(start) : kInf;
  const bool have = best.prediction.step_seconds < kInf;
  if (memory_dropped < threshold() * slack && (!have || (best.complete && !previous && time_left > 0))) {
    if (const std::optional<PlannerOptions> next = tighter()) {
      Planner tight = *this;
      tight.options_ = *next;
      if (have && options_.time_limit_seconds > 0) tight.options_.time_limit_seconds = time_left;
      Plan other = tight.run(available, previous, threshold(), programs.shared());
      if (other.prediction.step_seconds < best.prediction.step_seconds) {
        other.candidates += static_cast<int>(search.generated());
        other.candidates_solved += solved;
        other.milps += programs.milps();
        other.planning_seconds = seconds_since(start);
        return other;
      }
      if (!other.complete) {  // the limit cut the search below this plan short
        best.complete = false;
        best.lowest_bound_left = other.lowest_bound_left;
      }
    }
  }
  if (best.prediction.step_seconds == kInf && prune_at < kInf) return best;  // the caller has a plan
  if (best.prediction.step_seconds == kInf) {
    // Refuse with the figures: what the model's states need against what the devices have.
    const ModelShape& m = cost_.shape();
    const double params = m.stage_parameters(static_cast<int>(m.layers), true, true);
    double total_memory = 0, largest = 0, need = 0;
    for (int r : available) {
      const resolve::DeviceSpec& d = topology_.device(r);
      total_memory += d.memory;
      largest = std::max(largest, d.memory);
      const DeviceKindProfile& k = profile_.kind(d.type);
      need = std::max(need, params * (k.bytes_per_parameter + k.zero_bytes_per_parameter / available.size()));
    }
    HSPMD_THROW() << "planner: no plan fits in memory (" << search.generated()
                  << " pipeline configurations tried). The model has "
                  << params / 1e9 << " billion parameters, one decoder layer " << m.layer_parameters / 1e6
                  << " million; weights, gradients and optimizer states need at least "
                  << format_bytes(need) << " even with every state sharded over all " << available.size()
                  << " devices" << tried_settings(options_) << ", before activations of "
                  << options_.seq_len << "-token sequences; the devices have "
                  << format_bytes(total_memory) << " in all, the largest "
                  << format_bytes(largest) << ". Add devices, shorten the sequences or use a smaller model";
  }
  if (previous) {
    double least = kInf;
    for (const Found& f : found) {
      if (f.prediction.step_seconds > best.prediction.step_seconds * slack) continue;
      const double moved = moved_bytes(*previous, f.strategy);
      if (moved < least) {
        least = moved;
        best.strategy = f.strategy;
        best.prediction = f.prediction;
      }
    }
    best.moved_bytes = least;
  }
  // Why each usable rank is left out.
  const std::vector<int> used = best.strategy.ranks();
  std::map<std::string, int> tp_of;
  for (const auto& pipe : best.strategy.pipelines) {
    for (const auto& s : pipe.stages) tp_of[topology_.device(s.ranks.front()).type] = s.tp();
  }
  for (int r : available) {
    if (std::binary_search(used.begin(), used.end(), r)) continue;
    const resolve::DeviceSpec& d = topology_.device(r);
    std::ostringstream why;
    why << "rank " << r << " (" << d.type << ", node " << d.node << "): ";
    if (!tp_of.count(d.type)) {
      why << "every " << d.type << " left idle: the plan is predicted faster without them";
    } else {
      why << "left over on node " << d.node << " after its TP-" << tp_of[d.type] << " groups of " << d.type;
    }
    best.idle.push_back(why.str());
  }
  best.candidates = static_cast<int>(search.generated());
  best.candidates_solved = solved;
  best.milps = programs.milps();
  best.planning_seconds = seconds_since(start);
  return best;
}

Plan Planner::plan() const {
  std::vector<int> devices = options_.devices;
  if (devices.empty()) {
    for (int r = 0; r < topology_.num_devices(); ++r) devices.push_back(r);
  }
  return run(devices, nullptr);
}

Plan Planner::replan(const sharding::Strategy& previous, const std::vector<int>& available) const {
  HSPMD_CHECK(!available.empty()) << "replan: no ranks available";
  for (int r : available) {
    HSPMD_CHECK(r >= 0 && r < topology_.num_devices())
        << "replan: rank " << r << " is not in cluster " << topology_.name() << " (" << topology_.num_devices()
        << " devices)";
  }
  std::vector<int> devices = available;
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  return run(devices, &previous);
}

std::string PlanningProgress::to_string() const {
  std::ostringstream s;
  s.precision(4);
  s << "planning " << elapsed_seconds << " s: level 1 " << cuts << " cuts into TP groups, " << shapes
    << " (cut, pipelines) shapes expanded, " << candidates << " configurations generated; level 2 " << solved
    << " taken (" << relaxation_pruned << " dropped by their relaxation, " << milps
    << " integer programs, " << floor_skipped << " solutions not priced, their floor above the best); best ";
  if (best_step_seconds < kInf) {
    s << best_step_seconds << " s predicted";
  } else {
    s << "none fits yet";
  }
  s << ", lowest bound left ";
  if (lowest_bound_seconds < kInf) {
    s << lowest_bound_seconds << " s";
  } else {
    s << "none";
  }
  if (time_limit_seconds > 0) {
    s << "; " << std::max(0.0, time_limit_seconds - elapsed_seconds) << " s left of the " << time_limit_seconds
      << " s limit";
  }
  return s.str();
}

std::string describe_plan(const Plan& plan) {
  std::ostringstream s;
  s.precision(4);
  const sharding::Strategy& st = plan.strategy;
  if (!plan.complete) {
    s << "BEST FOUND WITHIN THE TIME LIMIT, search incomplete: configurations left unsearched have lower "
         "bounds from "
      << plan.lowest_bound_left << " s\n";
  }
  s << st.ranks().size() << " ranks in " << st.pipelines.size() << " pipeline" << (st.pipelines.size() == 1 ? "" : "s")
    << ", ZeRO " << st.zero << "\n";
  for (size_t p = 0; p < st.pipelines.size(); ++p) {
    const auto& pipe = st.pipelines[p];
    const auto& pred = plan.prediction.pipelines[p];
    s << "  pipeline " << p << ": " << pipe.num_micro_batches << " x micro-batch " << pipe.micro_batch_size << ", "
      << pred.end_seconds << " s:";
    for (size_t j = 0; j < pipe.stages.size(); ++j) {
      const auto& stage = pipe.stages[j];
      s << (j ? " ->" : "") << " [" << join_ranks(stage.ranks) << "] " << pred.stages[j].kind << " TP"
        << stage.tp() << (stage.cp > 1 ? " CP" + std::to_string(stage.cp) : "")
        << (stage.sequence_parallel ? " SP" : "") << " layers " << stage.first_layer
        << "-" << stage.last_layer;
    }
    s << "\n";
  }
  return s.str();
}

}  // namespace hspmd::planner
