// What a training run reports while it trains: one log line per step, evaluation, checkpoint and
// event (a switch, a dispatch decision, a recovery), and the same events as JSON lines in a metrics
// file. Every `hspmd train` mode writes through this one class, so their logs and metrics agree.
//
//   TrainingLog log(std::cout, {.total_steps = 100, .metrics_path = "runs/m.jsonl"});
//   log.step(m);                              // "step    12/100  loss 3.1234  lr ...", {"step": 12, ...}
//   log.line(report.to_string(), report.to_json());
//
// A distributed run has one reporting rank (the lowest live one): set_reporting() makes every
// other rank's calls no-ops. A terminal (an interactive single-process run) gets a progress bar
// under the step lines instead of checkpoint lines.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "hspmd/runtime/train_options.h"

namespace hspmd::runtime {

struct TrainingLogOptions {
  int64_t total_steps = 0;   // of the whole run: the step lines' "12/100"
  std::string metrics_path{};  // JSON lines; "" = none
  bool append = false;       // append to the metrics file (a resumed run continues its metrics)
  bool terminal = false;     // redraw a progress bar under the step lines
};

// "step    12/100  loss 3.1234  lr 3.000e-03  grad_norm 0.123  tok/s     1234  step 0.123s"
std::string step_line(const StepMetrics& m, int64_t total);
// "eval after step 20: validation loss 2.3456, perplexity 10.44", and its metrics line
// {"event": "eval", "step": 20, "val_loss": 2.3456}.
std::string eval_line(int64_t step, double loss);
nlohmann::json eval_record(int64_t step, double loss);

class TrainingLog {
 public:
  // Opens the metrics file (Error naming it when it cannot be written).
  TrainingLog(std::ostream& out, TrainingLogOptions options);
  // `reporting()` says whether this process writes now (false: every call is a no-op). Default:
  // always. A rank that was not reporting when the log was made has no metrics file.
  void set_reporting(std::function<bool()> reporting) { reporting_ = std::move(reporting); }

  // The run starts (again) after `steps_done` steps: the progress bar counts from here.
  void begin(int64_t steps_done);
  // The step line (with `suffix`, e.g. " (completed during recovery)") and its metrics line.
  void step(const StepMetrics& m, const std::string& suffix = "");
  void eval(int64_t step, double loss);
  void checkpoint(const std::string& dir, int64_t step);  // "saved checkpoint DIR at step N"
  // Any other event: a line, and its metrics record unless null.
  void line(const std::string& text, const nlohmann::json& record = nullptr);
  // A line every rank writes, reporting or not (e.g. its own part of the plan after a switch).
  void rank_line(const std::string& text) { out_ << text << std::endl; }
  // Clears the progress bar (a terminal) at the end of the run.
  void finish();

 private:
  void write_record(const nlohmann::json& record);

  std::ostream& out_;
  TrainingLogOptions options_;
  std::ofstream metrics_;
  std::function<bool()> reporting_;
  // The progress bar's origin (begin()).
  int64_t steps_done_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace hspmd::runtime
