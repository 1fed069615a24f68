// The records an elastic run keeps in its store, and their parsers. Each parser accepts what
// elastic_run.cc writes and otherwise throws an Error naming the store key (see comm/store_values.h
// for why: anything that can write the store can put any bytes there).
//
//   gen<G>/commit/<step>   "<grad norm> <loss>"            step_totals_text / parse_step_totals
//   gen<G>/plan            {"dead": [2], "strategy": "...", "predicted_step_seconds": 0.03}
//                          or {"dead": [2], "error": "..."} when the planner found no plan
//   gen<G>/progress        {"step": 4, "loader": "...", "strategy": "..."} for a joining rank
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hspmd::elastic {

// A committed step's global totals (gradient norm, loss), exact to the last bit.
std::string step_totals_text(const std::vector<double>& totals);
std::vector<double> parse_step_totals(const std::string& text, const std::string& key);

struct PlanRecord {
  std::vector<int> dead;               // ranks lost in this recovery, strictly increasing
  std::optional<std::string> error;    // the planner found no plan: why
  std::string strategy_text;           // the re-planned strategy's JSON (when no error)
  double predicted_step_seconds = 0;   // non-negative
};
PlanRecord parse_plan_record(const std::string& text, const std::string& key);

struct ProgressRecord {
  int64_t step = 0;            // steps done, non-negative
  std::string loader_json;     // data::LoaderState::to_json()
  std::string strategy_text;   // the run's strategy JSON
};
ProgressRecord parse_progress_record(const std::string& text, const std::string& key);

}  // namespace hspmd::elastic
