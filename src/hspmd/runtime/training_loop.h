// The one training loop of `hspmd train`, whatever the mode: one process (the one-rank case),
// a strategy on N processes, scheduled switches, dispatch by length, elastic training. The loop
// owns what every mode does the same way: step, divergence check, step log and metrics, evaluation
// and checkpoint cadence, the losses kept for the single-process check. What a mode adds comes in
// through hooks:
//
//   TrainingLog log(std::cout, {.total_steps = options.steps});
//   TrainingLoop loop(trainer, log, {.save_dir = "runs/ckpt", .save_every = 50});
//   ScheduledSwitches switches(plans, 0);   // runtime/scheduled_switches.h
//   loop.add_hook(switches);
//   loop.run();                             // until trainer.done()
//   loop.losses();                          // of every step this loop took, by step
//
// One iteration, for the step after trainer.step_count():
//   1. every hook's before_step (switch the trainer's plan, take a dispatch decision)
//   2. trainer.step(); a loss that is not finite stops the run (Error naming the step)
//   3. the step's log line and metrics record
//   4. evaluation after every eval_every-th step and after the last
//   5. checkpoint after every save_every-th step and after the last
//   6. every hook's after_step (admit restarted workers)
// When an Error escapes an iteration, the hooks are asked in turn to recover from it (elastic
// training); the first that does lets the loop go on from the trainer's new step, none rethrows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hspmd/core/error.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/runtime/training_log.h"

namespace hspmd::runtime {

class TrainingLoop;

// What a training mode adds to the loop. Every entry is optional; the defaults do nothing.
class TrainingHook {
 public:
  virtual ~TrainingHook() = default;
  // Before the step after loop.trainer().step_count(): may switch the trainer's plan and log it.
  virtual void before_step(TrainingLoop&) {}
  // After step `m.step`, its evaluation and its checkpoint.
  virtual void after_step(TrainingLoop&, const StepMetrics&) {}
  // An Error escaped an iteration on this rank. Returns true once the run has recovered and the
  // loop may go on (at the trainer's step_count()); false when this hook cannot help (default).
  // May throw an error that ends the run.
  virtual bool recover(TrainingLoop&, const Error&) { return false; }
};

struct TrainingLoopOptions {
  int64_t eval_every = 0;                        // validation loss every K steps and after the last; 0: never
  int64_t eval_tokens = 16384;                   // tokens of `validation` each evaluation reads
  const data::TokenDataset* validation = nullptr;  // required when eval_every > 0
  std::string save_dir{};                        // checkpoint directory after the last step; "" = none
  int64_t save_every = 0;                        // also checkpoint every K steps; 0: only after the last
};

class TrainingLoop {
 public:
  // The trainer and the log must outlive the loop.
  TrainingLoop(DistTrainer& trainer, TrainingLog& log, TrainingLoopOptions options);

  // The hook must outlive the loop; hooks run in the order they were added.
  void add_hook(TrainingHook& hook) { hooks_.push_back(&hook); }
  // Trains until trainer().done(). Collective: every process of the run calls it.
  void run();
  // One iteration (the steps 1-6 above), with the hooks' recovery: the step after the trainer's
  // step_count() is taken once this returns. Collective. For callers that drive the steps
  // themselves (the Python API's trainer.step); run() is this until trainer().done().
  void advance();
  // The metrics of the last step taken (by the trainer's step or completed during recovery).
  const StepMetrics& last_step() const { return last_; }

  DistTrainer& trainer() { return trainer_; }
  TrainingLog& log() { return log_; }

  // The loss of every step this loop took: losses()[i] is step first_step() + i.
  const std::vector<double>& losses() const { return losses_; }
  int64_t first_step() const { return steps_done_ + 1; }
  double seconds() const { return seconds_; }  // run()'s wall time

  // For recovery hooks. The run goes on after `steps_done` steps (a checkpoint restored an earlier
  // step: the later steps' losses go, their replay records them again).
  void rewind(int64_t steps_done);
  // Step `m.step` was completed while recovering from a failure: its loss replaces what the loop
  // knew from that step on, and it is logged as " (completed during recovery)".
  void completed_during_recovery(const StepMetrics& m);

 private:
  void iteration();
  // Keeps the step's loss (Error when it is not finite) and logs it.
  void record(const StepMetrics& m, const std::string& suffix);
  bool evaluates_after(int64_t step) const;
  bool saves_after(int64_t step) const;

  DistTrainer& trainer_;
  TrainingLog& log_;
  TrainingLoopOptions options_;
  std::vector<TrainingHook*> hooks_;
  int64_t steps_done_ = 0;  // when run() started
  std::vector<double> losses_;
  double seconds_ = 0;
  StepMetrics last_;
};

}  // namespace hspmd::runtime
