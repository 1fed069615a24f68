#include "hspmd/runtime/training_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "hspmd/core/elapsed.h"

namespace hspmd::runtime {

TrainingLoop::TrainingLoop(DistTrainer& trainer, TrainingLog& log, TrainingLoopOptions options)
    : trainer_(trainer), log_(log), options_(std::move(options)), steps_done_(trainer.step_count()) {
  HSPMD_CHECK(options_.eval_every == 0 || options_.validation != nullptr)
      << "training loop: evaluation every " << options_.eval_every << " steps needs a validation dataset";
}

void TrainingLoop::run() {
  steps_done_ = trainer_.step_count();
  losses_.clear();
  log_.begin(steps_done_);
  const auto start = std::chrono::steady_clock::now();
  while (!trainer_.done()) advance();
  log_.finish();
  seconds_ = seconds_since(start);
}

void TrainingLoop::advance() {
  const int64_t target = trainer_.step_count() + 1;
  // A recovery may roll the interrupted step forward (done) or back (redo it).
  while (trainer_.step_count() < target) {
    try {
      iteration();
    } catch (const Error& e) {
      bool recovered = false;
      for (TrainingHook* hook : hooks_) {
        if ((recovered = hook->recover(*this, e))) break;
      }
      if (!recovered) throw;
    }
  }
}

void TrainingLoop::iteration() {
  for (TrainingHook* hook : hooks_) hook->before_step(*this);
  const StepMetrics m = trainer_.step();
  record(m, "");
  if (evaluates_after(m.step)) log_.eval(m.step, trainer_.evaluate(*options_.validation, options_.eval_tokens));
  if (saves_after(m.step)) {
    trainer_.save(options_.save_dir);
    log_.checkpoint(options_.save_dir, m.step);
  }
  for (TrainingHook* hook : hooks_) hook->after_step(*this, m);
}

void TrainingLoop::record(const StepMetrics& m, const std::string& suffix) {
  losses_.push_back(m.loss);
  last_ = m;
  HSPMD_CHECK(std::isfinite(m.loss)) << "training diverged at step " << m.step << ": loss " << m.loss
                                     << " (lower --lr or enable --clip)";
  log_.step(m, suffix);
}

bool TrainingLoop::evaluates_after(int64_t step) const {
  return options_.eval_every > 0 && (trainer_.done() || step % options_.eval_every == 0);
}

bool TrainingLoop::saves_after(int64_t step) const {
  return !options_.save_dir.empty() && (trainer_.done() || (options_.save_every > 0 && step % options_.save_every == 0));
}

void TrainingLoop::rewind(int64_t steps_done) {
  losses_.resize(static_cast<size_t>(std::clamp<int64_t>(steps_done - steps_done_, 0, std::ssize(losses_))));
}

void TrainingLoop::completed_during_recovery(const StepMetrics& m) {
  losses_.resize(static_cast<size_t>(std::max<int64_t>(m.step - 1 - steps_done_, 0)));
  record(m, " (completed during recovery)");
}

}  // namespace hspmd::runtime
