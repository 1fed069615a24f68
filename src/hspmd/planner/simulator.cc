#include "hspmd/planner/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hspmd/core/elapsed.h"
#include "hspmd/core/error.h"
#include "hspmd/planner/dispatcher.h"
#include "hspmd/planner/mixed_length_planner.h"
#include "hspmd/planner/planner.h"
#include "hspmd/planner/switch_seconds.h"
#include "hspmd/switching/switch_plan.h"

namespace hspmd::planner {

namespace {

int64_t sequences_per_step(const sharding::Strategy& s) {
  int64_t n = 0;
  for (const sharding::PipelineSpec& p : s.pipelines) n += int64_t{p.micro_batch_size} * p.num_micro_batches;
  return n;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

}  // namespace

sharding::Strategy surviving_pipelines(const sharding::Strategy& strategy, const std::vector<int>& available,
                                       int64_t global_batch) {
  sharding::Strategy out = strategy;
  out.pipelines.clear();
  for (const sharding::PipelineSpec& p : strategy.pipelines) {
    bool whole = true;
    for (const sharding::StageSpec& s : p.stages) {
      for (int r : s.ranks) whole = whole && std::binary_search(available.begin(), available.end(), r);
    }
    if (whole) out.pipelines.push_back(p);
  }
  HSPMD_CHECK(!out.pipelines.empty()) << "strategy " << strategy.name << ": no pipeline has all its ranks among the "
                                      << available.size() << " available (" << rank_list(available) << ")";
  if (out.pipelines.size() == strategy.pipelines.size() || global_batch == 0) return out;
  const double kept = static_cast<double>(sequences_per_step(out));
  for (sharding::PipelineSpec& p : out.pipelines) {
    const double share = static_cast<double>(global_batch) * p.micro_batch_size * p.num_micro_batches / kept;
    p.num_micro_batches = static_cast<int>(std::ceil(share / p.micro_batch_size - 1e-9));
  }
  out.name = strategy.name + "-" + std::to_string(out.pipelines.size()) + "of" + std::to_string(strategy.pipelines.size());
  return out;
}

Simulator::Simulator(const models::Model& model, const resolve::Topology& topology, const Profile& profile,
                     const RunTrace& trace, SimulatorOptions options)
    : model_(model),
      topology_(topology),
      profile_(profile),
      trace_(trace),
      options_(options),
      cost_(model, topology, profile, {.seq_len = trace.seq_len}),
      parameters_(models::parameter_shapes(model)) {
  HSPMD_CHECK(!(trace.mixed_lengths() && !trace.events.empty()))
      << trace.source << ": a trace with both mixed lengths and events is not simulated (the mixed-length planner "
      << "does not re-plan); give one or the other";
}

std::optional<double> Simulator::move_seconds(const sharding::Strategy& from, const sharding::Strategy& to,
                                              const std::vector<int>& dead) const {
  std::vector<switching::ParamLayout> a = switching::param_layouts(model_.compile_plan(from), parameters_);
  const std::vector<switching::ParamLayout> b = switching::param_layouts(model_.compile_plan(to), parameters_);
  // As the trainer after a failure: a parameter's up-to-date elements are its optimizer-state layout's.
  if (!dead.empty()) {
    for (switching::ParamLayout& l : a) l.value = l.state;
  }
  try {
    return bsr_seconds(switching::plan_switch(a, b, {.topology = &topology_, .dead = dead}).bsr, topology_);
  } catch (const Error&) {
    if (dead.empty()) throw;
    return std::nullopt;  // what the trainer reports as StateLost
  }
}

Simulator::Priced Simulator::price(const sharding::Strategy& strategy) const {
  Priced p{.strategy = strategy};
  if (trace_.mixed_lengths()) {
    p.pipelines = pipeline_models(cost_, strategy, {.seq_len = trace_.seq_len});
  } else {
    const Prediction prediction = cost_.predict(strategy);
    HSPMD_CHECK(prediction.fits) << "strategy " << strategy.name << " does not fit in memory: "
                                 << prediction.overflows.front();
    p.uniform_seconds = prediction.step_seconds;
  }
  return p;
}

double Simulator::seconds(const Priced& priced, int64_t step) const {
  if (!trace_.mixed_lengths()) return priced.uniform_seconds;
  const std::vector<int64_t> lengths = trace_.lengths_of(step);
  if (std::optional<std::string> why = sequence_too_long(lengths, priced.pipelines)) {
    HSPMD_THROW() << "strategy " << priced.strategy.name << " cannot hold step " << step << "'s batch: " << *why;
  }
  return dispatch(lengths, priced.pipelines).step_seconds;
}

double Simulator::step_seconds(const sharding::Strategy& strategy, int64_t step) const {
  return seconds(price(strategy), step);
}

PolicyRun Simulator::replay(const std::string& name, const sharding::Strategy& initial, const React& react) const {
  PolicyRun run{.name = name};
  Priced current = price(initial);
  std::vector<int> available(static_cast<size_t>(topology_.num_devices()));
  for (int r = 0; r < topology_.num_devices(); ++r) available[static_cast<size_t>(r)] = r;
  size_t next_event = 0;
  for (int64_t step = 0; step < trace_.steps; ++step) {
    std::string what;  // the events before this step
    for (; next_event < trace_.events.size() && trace_.events[next_event].step == step; ++next_event) {
      const TraceEvent& e = trace_.events[next_event];
      for (int r : e.lose) std::erase(available, r);
      for (int r : e.give_back) {
        if (!std::binary_search(available.begin(), available.end(), r)) {
          available.insert(std::upper_bound(available.begin(), available.end(), r), r);
        }
      }
      if (!e.lose.empty()) what += (what.empty() ? "lost " : ", lost ") + rank_list(e.lose);
      if (!e.give_back.empty()) what += (what.empty() ? "returned " : ", returned ") + rank_list(e.give_back);
    }
    const std::string when = "before step " + std::to_string(step) + " (" + what + ")";
    try {
      if (!what.empty()) {
        const auto start = std::chrono::steady_clock::now();
        Priced next = price(react(current.strategy, available));
        const double decided = seconds_since(start);
        if (!(next.strategy == current.strategy)) {
          std::vector<int> dead;
          for (int r : current.strategy.ranks()) {
            if (!std::binary_search(available.begin(), available.end(), r)) dead.push_back(r);
          }
          std::ostringstream line;
          line << when << ": " << current.strategy.name << " -> " << next.strategy.name << " ("
               << next.strategy.ranks().size() << " ranks"
               << (trace_.mixed_lengths() ? "" : ", step " + fixed(next.uniform_seconds, 3) + " s") << ", decided in "
               << fixed(decided, 2) << " s of planning, not counted); ";
          if (const std::optional<double> moved = move_seconds(current.strategy, next.strategy, dead)) {
            run.switch_seconds += *moved;
            ++run.switches;
            line << "state moved by one fused BSR in " << fixed(*moved, 3) << " s";
          } else {
            HSPMD_CHECK(trace_.checkpoint_every > 0)
                << "the state of " << current.strategy.name << " has no surviving copy and the trace gives no checkpoint";
            const int64_t since = step % trace_.checkpoint_every;
            double redo = 0;
            for (int64_t s = step - since; s < step; ++s) redo += seconds(next, s);
            run.recovery_seconds += trace_.restore_seconds + redo;
            ++run.restores;
            line << "state has no surviving copy: checkpoint of step " << step - since << " restored in "
                 << fixed(trace_.restore_seconds, 1) << " s, and " << since << " steps run again in " << fixed(redo, 1)
                 << " s";
          }
          run.log.push_back(line.str());
          current = std::move(next);
        }
      }
      run.step_seconds += seconds(current, step);
    } catch (const Error& e) {
      run.stopped = (what.empty() ? "at step " + std::to_string(step) : when) + ": " + e.what();
      return run;
    }
    run.tokens += static_cast<double>(trace_.tokens_of(step));
    ++run.steps;
  }
  return run;
}

std::vector<PolicyRun> Simulator::planner_runs() const {
  if (trace_.mixed_lengths()) {
    int64_t tokens = 0;
    for (int64_t s = 0; s < trace_.steps; ++s) tokens += trace_.tokens_of(s);
    const MixedLengthPlan plan =
        plan_mixed_length(model_, topology_, profile_, trace_.length_counts(),
                          {.seq_len = trace_.seq_len,
                           .global_batch_tokens = trace_.global_batch_tokens > 0 ? trace_.global_batch_tokens
                                                                                 : tokens / trace_.steps,
                           .name = "planned",
                           .methods_per_interval = options_.methods_per_interval});
    std::vector<PolicyRun> runs;
    runs.push_back(replay("planner: heterogeneous", plan.heterogeneous, nullptr));
    runs.push_back(length_set_run(plan.per_max_length, "planner: per max length"));
    // The planner prices the expected batch (the trace's lengths scaled to a step's tokens); the runs
    // price each batch as drawn, so the two differ by the batches' spread.
    runs[0].log.push_back("the mixed-length planner predicted " + fixed(plan.predicted_seconds, 3) +
                          " s a step for the expected batch; the batches as drawn average " +
                          fixed(runs[0].step_seconds / std::max<int64_t>(runs[0].steps, 1), 3) + " s");
    return runs;
  }
  PlannerOptions po;
  po.global_batch = trace_.global_batch;
  po.seq_len = trace_.seq_len;
  po.zero1 = false;
  po.replan_tolerance = options_.replan_tolerance;
  po.name = "planned";
  const Planner planner(model_, topology_, profile_, po);
  const Plan first = planner.plan();
  int generation = 0;
  const React react = [&](const sharding::Strategy& current, const std::vector<int>& available) {
    const std::vector<int> used = current.ranks();
    const bool lost_used = std::any_of(used.begin(), used.end(), [&](int r) {
      return !std::binary_search(available.begin(), available.end(), r);
    });
    const bool gained = std::any_of(available.begin(), available.end(), [&](int r) {
      return !std::binary_search(used.begin(), used.end(), r);
    });
    if (!lost_used && !gained) return current;
    sharding::Strategy next = planner.replan(current, available).strategy;
    next.name = "planned-gen" + std::to_string(++generation);
    return next;
  };
  return {replay("planner", first.strategy, react)};
}

PolicyRun Simulator::fixed_run(const sharding::Strategy& strategy) const {
  HSPMD_CHECK(trace_.mixed_lengths() || sequences_per_step(strategy) == trace_.global_batch)
      << "strategy " << strategy.name << " trains " << sequences_per_step(strategy) << " sequences a step, the trace "
      << trace_.source << " " << trace_.global_batch << " (global_batch)";
  const int64_t batch = trace_.mixed_lengths() ? 0 : trace_.global_batch;
  return replay("fixed: " + strategy.name, strategy,
                [&](const sharding::Strategy&, const std::vector<int>& available) {
                  return surviving_pipelines(strategy, available, batch);
                });
}

PolicyRun Simulator::length_set_run(std::vector<LengthStrategy> set, const std::string& name) const {
  HSPMD_CHECK(trace_.mixed_lengths()) << "strategies per maximum length need a trace of mixed lengths; "
                                      << trace_.source << " has one length";
  const LengthStrategies strategies(model_, cost_, std::move(set), {.seq_len = trace_.seq_len});
  PolicyRun run{.name = name};
  size_t current = LengthStrategies::kNone;
  for (int64_t step = 0; step < trace_.steps; ++step) {
    const std::vector<int64_t> lengths = trace_.lengths_of(step);
    Choice c;
    try {
      c = strategies.choose(lengths, current);
    } catch (const Error& e) {
      run.stopped = "at step " + std::to_string(step) + ": " + e.what();
      return run;
    }
    if (c.switch_seconds > 0) {
      run.switch_seconds += c.switch_seconds;
      ++run.switches;
    }
    current = c.strategy;
    run.step_seconds += c.dispatch.step_seconds;
    run.tokens += static_cast<double>(trace_.tokens_of(step));
    ++run.steps;
  }
  return run;
}

std::string comparison_table(const std::vector<PolicyRun>& runs) {
  size_t width = 6;
  for (const PolicyRun& r : runs) width = std::max(width, r.name.size());
  std::ostringstream s;
  s << std::left << std::setw(static_cast<int>(width)) << "policy" << std::right << std::setw(7) << "steps"
    << std::setw(12) << "total s" << std::setw(12) << "tokens/s" << std::setw(9) << "vs 1st" << std::setw(11)
    << "steps s" << std::setw(10) << "switch s" << std::setw(12) << "recovery s" << std::setw(10) << "switches"
    << std::setw(10) << "restores" << "\n";
  const double base = runs.empty() ? 0 : runs.front().tokens_per_second();
  for (const PolicyRun& r : runs) {
    s << std::left << std::setw(static_cast<int>(width)) << r.name << std::right << std::setw(7) << r.steps
      << std::setw(12) << fixed(r.total_seconds(), 1) << std::setw(12) << fixed(r.tokens_per_second(), 0)
      << std::setw(9) << (base > 0 ? fixed(r.tokens_per_second() / base, 3) : "-") << std::setw(11)
      << fixed(r.step_seconds, 1) << std::setw(10) << fixed(r.switch_seconds, 2) << std::setw(12)
      << fixed(r.recovery_seconds, 1) << std::setw(10) << r.switches << std::setw(10) << r.restores << "\n";
  }
  for (const PolicyRun& r : runs) {
    if (!r.stopped.empty()) s << r.name << ": stopped " << r.stopped << "\n";
  }
  return s.str();
}

std::string comparison_json(const RunTrace& trace, const std::vector<PolicyRun>& runs) {
  nlohmann::ordered_json j = {{"trace", trace.name}, {"steps", trace.steps}};
  j["policies"] = nlohmann::ordered_json::array();
  for (const PolicyRun& r : runs) {
    j["policies"].push_back({{"name", r.name},
                             {"steps", r.steps},
                             {"tokens", r.tokens},
                             {"total_seconds", r.total_seconds()},
                             {"tokens_per_second", r.tokens_per_second()},
                             {"step_seconds", r.step_seconds},
                             {"switch_seconds", r.switch_seconds},
                             {"recovery_seconds", r.recovery_seconds},
                             {"switches", r.switches},
                             {"restores", r.restores},
                             {"stopped", r.stopped},
                             {"log", r.log}});
  }
  return j.dump(2) + "\n";
}

}  // namespace hspmd::planner
