// Dispatch decisions computed ahead of training, off its critical path: a background thread reads
// the run's global batches from its own Loader (same dataset, options and position as the trainer's,
// so the same batches: data/loader.h is a pure function of (seed, epoch, cursor)) and, for each,
// picks the strategy and the dispatch (planner/length_strategies.h) up to `depth` steps before the
// trainer needs it. Every rank runs the same computation on the same input, so all agree without
// talking.
//
//   DispatchAhead ahead(dataset, loader_options, trainer.loader_state(), strategies, /*current=*/0, 2);
//   DispatchDecision d = ahead.next();         // the next step's (waits only if not yet computed)
//   if (d.strategy != in_force) trainer.switch_to(strategies.plan(d.strategy), ...);
//   d.split(global_batch)                      // [pipeline][micro-batch] -> segments
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hspmd/data/loader.h"
#include "hspmd/planner/length_strategies.h"

namespace hspmd::planner {

struct DispatchDecision {
  int64_t step = 0;       // 1-based step this decision is for
  size_t strategy = 0;    // index in the LengthStrategies
  Choice choice;
  std::vector<std::pair<uint64_t, uint64_t>> segments;  // (document, begin) of the batch, to check it
  double decide_seconds = 0;  // the background thread's time on this decision
  int64_t ahead = 0;          // decisions ready when the trainer asked for this one (>= 1: it did not wait)

  // The batch split as dispatched. Error when `global` is not the batch this decision was made for
  // (the trainer's data stream and the look-ahead's diverged).
  data::BatchSplit split(const std::vector<data::Segment>& global) const;
  // "dispatch step 5: strategy short (predicted 0.12 s; long 0.15 s + switch 0.02 s) | pipeline 0: ..."
  std::string to_string(const LengthStrategies& set) const;
};

class DispatchAhead {
 public:
  // The dataset and strategies must outlive this object. `current` is the strategy in force before
  // the first decision; `first_step` the step of the first decision.
  DispatchAhead(const data::TokenDataset& dataset, data::LoaderOptions options, data::LoaderState state,
                const LengthStrategies& strategies, size_t current, int depth = 2, int64_t first_step = 1);
  ~DispatchAhead();
  DispatchAhead(const DispatchAhead&) = delete;
  DispatchAhead& operator=(const DispatchAhead&) = delete;

  // The next step's decision, in step order; rethrows the error the thread met deciding it
  // (SequenceTooLong for a batch no strategy can hold).
  DispatchDecision next();

 private:
  void run();

  data::Loader loader_;
  const LengthStrategies& strategies_;
  size_t current_;
  int depth_;
  int64_t step_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<DispatchDecision> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace hspmd::planner
