#include "hspmd/cli/train_dispatch.h"

#include <algorithm>
#include <optional>
#include <sstream>

#include "hspmd/core/byte_size.h"
#include "hspmd/planner/derived_profile.h"

namespace hspmd::cli {

bool uses_length_dispatch(const TrainArgs& args) { return args.dispatch || !args.strategies_for_max_len.empty(); }

int LengthDispatchRun::world() const {
  int world = 0;
  for (size_t i = 0; i < strategies->size(); ++i) world = std::max(world, strategies->at(i).strategy.ranks().back() + 1);
  return world;
}

std::string LengthDispatchRun::describe() const {
  std::ostringstream out;
  out << "dispatch by length, cost model from " << profile.source << " on cluster " << topology.name() << ":";
  for (size_t i = 0; i < strategies->size(); ++i) {
    const planner::LengthStrategy& s = strategies->at(i);
    out << "\n  strategy " << s.strategy.name << " for batches up to " << s.max_len << " tokens: "
        << s.strategy.pipelines.size() << " pipeline(s), longest sequence each holds";
    for (const planner::PipelineModel& p : strategies->pipelines(i)) out << " " << p.max_tokens;
    // bf16-only switches: no strategy moves the state; each step away from the base pays its two
    // moves, what the dispatch decisions count as the switch.
    if (const std::optional<size_t> base = strategies->bf16_base()) {
      if (i == *base) {
        out << "; holds the weights and Adam moments (bf16-only switches)";
      } else {
        out << "; each step under it, bf16 only from " << strategies->at(*base).strategy.name << ": params out "
            << format_bytes(strategies->bf16_params_out_bytes(i)) << ", grads back "
            << format_bytes(strategies->bf16_grads_back_bytes(i)) << " ("
            << strategies->bf16_params_out_bytes(i) + strategies->bf16_grads_back_bytes(i) << " bytes), predicted "
            << strategies->bf16_step_seconds(i) << " s";
      }
      continue;
    }
    for (size_t j = 0; j < strategies->size(); ++j) {
      if (j == i) continue;
      out << "; switch to " << strategies->at(j).strategy.name << " " << strategies->switch_bytes(i, j)
          << " bytes, predicted " << strategies->switch_seconds(i, j) << " s";
    }
  }
  return out.str();
}

void LengthDispatchRun::before_step(runtime::TrainingLoop& loop) {
  const std::optional<runtime::SwitchReport> r = training->before_step(loop.trainer());
  loop.log().line(training->decision().to_string(*strategies));
  if (r) loop.log().line(r->to_string(), r->to_json());
}

std::unique_ptr<LengthDispatchRun> make_length_dispatch(const TrainArgs& args, const models::Model& model) {
  if (!uses_length_dispatch(args)) return nullptr;
  HSPMD_CHECK(!args.cluster.empty())
      << "--strategy-for-max-len and --dispatch need --cluster C.json (devices, memory and links for the cost model)";
  HSPMD_CHECK(args.switches.empty())
      << "--switch and dispatch by length exclude each other: with --strategy-for-max-len the run switches by itself";
  HSPMD_CHECK(!args.dispatch || (!args.strategy.empty() && args.strategies_for_max_len.empty()))
      << "--dispatch dispatches on the one --strategy; with --strategy-for-max-len, leave out --strategy and --dispatch";
  HSPMD_CHECK(args.dispatch || args.strategy.empty())
      << "--strategy and --strategy-for-max-len exclude each other: give every strategy with its maximum length";
  auto run = std::make_unique<LengthDispatchRun>(resolve::Topology::from_file(args.cluster));
  run->profile = args.profile.empty()
                     ? planner::derive_profile(model, run->topology,
                                               {.model = args.model, .reserved_bytes = 0, .cluster = args.cluster})
                     : planner::Profile::from_file(args.profile);
  run->cost_model = std::make_unique<planner::CostModel>(
      model, run->topology, run->profile,
      planner::CostOptions{.seq_len = args.options.seq_len,
                           .schedule = specialize::parse_schedule_kind(args.schedule),
                           .grad_bucket_mb = args.grad_bucket_mb});
  std::vector<planner::LengthStrategy> set;
  if (args.dispatch) {
    set.push_back({args.options.seq_len, sharding::Strategy::from_file(args.strategy)});
  } else {
    for (const std::string& spec : args.strategies_for_max_len) set.push_back(planner::parse_length_strategy(spec));
    std::stable_sort(set.begin(), set.end(), [](const auto& a, const auto& b) { return a.max_len < b.max_len; });
  }
  run->strategies = std::make_unique<planner::LengthStrategies>(model, *run->cost_model, std::move(set),
                                                                planner::PipelineModelOptions{.seq_len = args.options.seq_len});
  run->training = std::make_unique<tuning::DispatchedTraining>(*run->strategies, args.dispatch_ahead);
  return run;
}

}  // namespace hspmd::cli
