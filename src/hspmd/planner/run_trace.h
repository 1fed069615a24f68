// A run's trace for the simulator (planner/simulator.h): how many steps, what each step's batch
// holds, and the membership events between steps. JSON, e.g. (examples/traces/):
//
//   {
//     "name": "h20-nodes-lost-and-back",
//     "steps": 300,
//     "seq_len": 4096,
//     "global_batch": 64,                          // fixed-length: 64 sequences of seq_len tokens
//     "checkpoint": {"every": 50, "restore_seconds": 120},
//     "events": [{"step": 100, "lose": "40-47"}, {"step": 200, "return": "40-47"}]
//   }
//
// Mixed lengths give "batches" in place of "global_batch", either drawn or listed:
//   "batches": {"long_tailed": {"median": 1024, "sigma": 1.5, "seed": 3}, "global_batch_tokens": 262144}
//   "batches": {"lengths": [[4096, 120, 77], [30000, 512], ...]}     (one list per step)
// Drawn batches are the lognormal documents of data/long_tailed.h (clipped to seq_len), taken in
// order: each step takes documents while its tokens stay within global_batch_tokens (at least one).
//
// An event happens before the step it names (0 = before the first step). "lose" and "return" are
// rank lists ("40-47", "0-3,8" or an array). "checkpoint" is what a run falls back to when a loss
// leaves some state without a surviving copy (docs/elastic.md): it restarts from the last multiple of
// `every` steps, paying `restore_seconds` and the steps since then again; without it such a loss
// ends the run. Keys are checked; errors name the file and the key at fault.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hspmd::planner {

struct TraceEvent {
  int64_t step = 0;               // happens before this step
  std::vector<int> lose{}, give_back{};  // ranks lost, ranks returned (ascending)
};

struct RunTrace {
  std::string name, source;
  int64_t steps = 0;
  int64_t seq_len = 0;        // fixed-length: every sequence's tokens; mixed: the longest
  int64_t global_batch = 0;   // fixed-length: sequences per step; 0 for mixed lengths
  int64_t global_batch_tokens = 0;  // mixed, drawn: the tokens a step's documents stay within
  std::vector<std::vector<int64_t>> batches;  // mixed: per step, its sequences' lengths; empty: fixed
  std::vector<TraceEvent> events;  // ascending step
  int64_t checkpoint_every = 0;    // 0: no checkpoint
  double restore_seconds = 0;

  bool mixed_lengths() const { return !batches.empty(); }
  // The sequences of step `step` (fixed-length: global_batch times seq_len).
  std::vector<int64_t> lengths_of(int64_t step) const;
  // The tokens of step `step`.
  int64_t tokens_of(int64_t step) const;
  // Every sequence length of the trace with its count, ascending (the mixed-length planner's input).
  std::vector<std::pair<int64_t, uint64_t>> length_counts() const;

  // Errors name the source and the key; `num_devices` bounds the ranks of the events.
  static RunTrace from_json_text(const std::string& text, const std::string& source, int num_devices);
  static RunTrace from_file(const std::string& path, int num_devices);
};

}  // namespace hspmd::planner
