#include "hspmd/cli/train_prelaunch.h"

#include <string>
#include <utility>
#include <vector>

#include "hspmd/core/error.h"
#include "hspmd/specialize/plan_report.h"
#include "hspmd/switching/switch_plan.h"

namespace hspmd::cli {

namespace {

// A plan the run may train under, with the flag that gave it (how the error names it).
struct Candidate {
  std::string flag;
  sharding::Strategy strategy;
  sharding::AnnotationPlan plan;
};

// The flag's words prepended to whatever `fn` throws.
template <typename Fn>
void naming(const std::string& flag, const std::string& strategy, Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    throw Error(flag + ": strategy " + strategy + " cannot run: " + e.what(), e.origin());
  }
}

std::vector<Candidate> candidates(const TrainArgs& args, const models::Model& model,
                                  const LengthDispatchRun* by_length) {
  std::vector<Candidate> out;
  if (by_length) {
    for (size_t i = 0; i < by_length->strategies->size(); ++i) {
      const planner::LengthStrategy& s = by_length->strategies->at(i);
      out.push_back({"--strategy-for-max-len " + std::to_string(s.max_len), s.strategy, by_length->strategies->plan(i)});
    }
    return out;
  }
  // The --switch STEP:FILE texts were checked when the run's plans were read (cli/train_dist.cc).
  std::vector<std::pair<std::string, std::string>> files{{"--strategy " + args.strategy, args.strategy}};
  for (const std::string& spec : args.switches) files.emplace_back("--switch " + spec, spec.substr(spec.find(':') + 1));
  for (const auto& [flag, file] : files) {
    sharding::Strategy st = sharding::Strategy::from_file(file);
    Candidate c{flag, st, {}};
    naming(flag, st.name, [&] { c.plan = model.compile_plan(st); });
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

void resolve_before_launch(const TrainArgs& args, const models::Model& model, const LengthDispatchRun* by_length) {
  const std::vector<Candidate> plans = candidates(args, model, by_length);
  const models::ModelGraph graph = model.build({});
  const specialize::PlanReportOptions options{.schedule = specialize::parse_schedule_kind(args.schedule),
                                              .seq_len = args.options.seq_len};
  for (const Candidate& c : plans) {
    naming(c.flag, c.strategy.name, [&] { specialize::make_plan_report(graph, c.plan, options); });
  }
  // Dispatch by length planned the switches between its strategies when it priced them
  // (planner/length_strategies.h); scheduled switches go from each plan to the next.
  if (by_length) return;
  const std::vector<std::pair<std::string, Shape>> params = models::parameter_shapes(model);
  for (size_t i = 1; i < plans.size(); ++i) {
    naming(plans[i].flag, plans[i].strategy.name, [&] {
      switching::plan_switch(switching::param_layouts(plans[i - 1].plan, params),
                             switching::param_layouts(plans[i].plan, params), {.optimizer_states = true});
    });
  }
}

}  // namespace hspmd::cli
