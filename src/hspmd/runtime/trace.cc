#include "hspmd/runtime/trace.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>

#include "hspmd/core/atomic_file.h"
#include "hspmd/core/error.h"

namespace hspmd::runtime {

double TraceSummary::share(const std::string& category) const {
  auto it = seconds.find(category);
  if (it == seconds.end() || window_seconds <= 0) return 0;
  return it->second / window_seconds;
}

Tracer::Tracer(int rank, bool enabled) : rank_(rank), enabled_(enabled), origin_(std::chrono::steady_clock::now()) {}

double Tracer::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_).count();
}

void Tracer::record(const std::string& name, const std::string& category, double start_us, double end_us) {
  if (!enabled_) return;
  HSPMD_CHECK(std::isfinite(start_us) && std::isfinite(end_us) && end_us >= start_us)
      << "trace span \"" << name << "\" (" << category << ") on rank " << rank_ << ": end " << end_us
      << " us is before start " << start_us << " us";
  std::lock_guard<std::mutex> lock(mutex_);
  // emplace keeps an existing index, so each thread keeps the tid of its first span.
  const int tid = thread_index_.emplace(std::this_thread::get_id(), static_cast<int>(thread_index_.size()))
                      .first->second;
  events_.push_back(TraceEvent{name, category, start_us, end_us - start_us, tid});
}

std::vector<TraceEvent> Tracer::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

TraceSummary Tracer::summary() const {
  std::vector<TraceEvent> events = this->events();
  TraceSummary summary;
  if (events.empty()) return summary;
  double first = events[0].start_us, last = events[0].start_us + events[0].duration_us;
  std::map<std::string, std::vector<std::pair<double, double>>> spans;
  for (const TraceEvent& e : events) {
    first = std::min(first, e.start_us);
    last = std::max(last, e.start_us + e.duration_us);
    spans[e.category].emplace_back(e.start_us, e.start_us + e.duration_us);
  }
  summary.window_seconds = (last - first) * 1e-6;
  // Union length per category: sort by start and sweep, so a span overlapping another of its
  // category (two threads sending at once, nested spans) is not counted twice.
  for (auto& [category, intervals] : spans) {
    std::sort(intervals.begin(), intervals.end());
    double busy_us = 0;
    double run_start = intervals[0].first, run_end = intervals[0].second;
    for (const auto& [s, e] : intervals) {
      if (s > run_end) {
        busy_us += run_end - run_start;
        run_start = s;
        run_end = e;
      } else {
        run_end = std::max(run_end, e);
      }
    }
    busy_us += run_end - run_start;
    summary.seconds[category] = busy_us * 1e-6;
  }
  return summary;
}

void Tracer::write(const std::string& path) const {
  std::vector<TraceEvent> events = this->events();
  std::stable_sort(events.begin(), events.end(),
                   [](const TraceEvent& a, const TraceEvent& b) { return a.start_us < b.start_us; });
  nlohmann::json list = nlohmann::json::array();
  // Metadata first, so viewers label the process track "rank N" rather than by pid.
  list.push_back({{"name", "process_name"},
                  {"ph", "M"},
                  {"pid", rank_},
                  {"tid", 0},
                  {"args", {{"name", "rank " + std::to_string(rank_)}}}});
  for (const TraceEvent& e : events) {
    list.push_back({{"name", e.name},
                    {"cat", e.category},
                    {"ph", "X"},
                    {"ts", e.start_us},
                    {"dur", e.duration_us},
                    {"pid", rank_},
                    {"tid", e.tid}});
  }
  const nlohmann::json root = {{"traceEvents", std::move(list)}, {"displayTimeUnit", "ms"}};
  const std::string text = root.dump() + "\n";
  AtomicFile out(path);  // its errors name the path
  out.write(text.data(), text.size());
  out.commit();
}

void Tracer::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.clear();
}

TraceSpan::TraceSpan(Tracer& tracer, std::string name, std::string category)
    : tracer_(tracer), name_(std::move(name)), category_(std::move(category)) {
  if (tracer_.enabled()) start_us_ = tracer_.now_us();
}

TraceSpan::~TraceSpan() {
  // record() may throw only for end < start, impossible on a steady clock; a destructor must not
  // throw, so a failure there would terminate, which is the right outcome for a broken clock.
  if (tracer_.enabled()) tracer_.record(name_, category_, start_us_, tracer_.now_us());
}

}  // namespace hspmd::runtime
