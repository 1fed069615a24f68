#include "hspmd/runtime/training_log.h"

#include <cmath>
#include <cstdio>

#include "hspmd/core/elapsed.h"
#include "hspmd/core/error.h"

namespace hspmd::runtime {

namespace {

// Erases the terminal line the progress bar occupies.
constexpr const char* kClearLine = "\r\033[K";

std::string format_duration(double seconds) {
  long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%ldh%02ldm", s / 3600, (s / 60) % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%ldm%02lds", s / 60, s % 60);
  }
  return buf;
}

// "[##########----------]  50/100  ETA 1m23s"
std::string progress_bar(int64_t done, int64_t first, int64_t total, double elapsed) {
  constexpr int kWidth = 30;
  int filled = total > 0 ? static_cast<int>(kWidth * done / total) : kWidth;
  std::string bar = "[" + std::string(filled, '#') + std::string(kWidth - filled, '-') + "]";
  double per_step = done > first ? elapsed / static_cast<double>(done - first) : 0.0;
  return bar + " " + std::to_string(done) + "/" + std::to_string(total) +
         "  ETA " + format_duration(per_step * static_cast<double>(total - done));
}

}  // namespace

std::string step_line(const StepMetrics& m, int64_t total) {
  char buf[200];
  std::snprintf(buf, sizeof(buf), "step %5lld/%lld  loss %.4f  lr %.3e  grad_norm %.3f  tok/s %8.0f  step %.3fs",
                static_cast<long long>(m.step), static_cast<long long>(total), m.loss, m.lr, m.grad_norm,
                m.tokens_per_second, m.step_seconds);
  return m.bf16_switch ? buf + m.bf16_switch->to_string() : std::string(buf);
}

std::string eval_line(int64_t step, double loss) {
  char buf[120];
  std::snprintf(buf, sizeof buf, "eval after step %lld: validation loss %.4f, perplexity %.2f",
                static_cast<long long>(step), loss, std::exp(loss));
  return buf;
}

nlohmann::json eval_record(int64_t step, double loss) {
  return {{"event", "eval"}, {"step", step}, {"val_loss", loss}};
}

TrainingLog::TrainingLog(std::ostream& out, TrainingLogOptions options)
    : out_(out), options_(std::move(options)), reporting_([] { return true; }) {
  if (!options_.metrics_path.empty()) {
    metrics_.open(options_.metrics_path, options_.append ? std::ios::app : std::ios::trunc);
    HSPMD_CHECK(metrics_.good()) << "cannot open metrics file " << options_.metrics_path;
  }
}

void TrainingLog::begin(int64_t steps_done) {
  steps_done_ = steps_done;
  start_ = std::chrono::steady_clock::now();
}

void TrainingLog::step(const StepMetrics& m, const std::string& suffix) {
  if (!reporting_()) return;
  if (options_.terminal) {
    const double elapsed = seconds_since(start_);
    out_ << kClearLine << step_line(m, options_.total_steps) << suffix << "\n"
         << progress_bar(m.step, steps_done_, options_.total_steps, elapsed) << std::flush;
  } else {
    out_ << step_line(m, options_.total_steps) << suffix << std::endl;
  }
  write_record(m.to_json());
}

void TrainingLog::eval(int64_t step, double loss) { line(eval_line(step, loss), eval_record(step, loss)); }

void TrainingLog::checkpoint(const std::string& dir, int64_t step) {
  if (options_.terminal) return;  // the progress bar stands for it
  line("saved checkpoint " + dir + " at step " + std::to_string(step));
}

void TrainingLog::line(const std::string& text, const nlohmann::json& record) {
  if (!reporting_()) return;
  out_ << (options_.terminal ? kClearLine : "") << text << std::endl;
  write_record(record);
}

void TrainingLog::finish() {
  if (options_.terminal && reporting_()) out_ << kClearLine;
}

void TrainingLog::write_record(const nlohmann::json& record) {
  if (metrics_.is_open() && !record.is_null()) metrics_ << record.dump() << std::endl;
}

}  // namespace hspmd::runtime
