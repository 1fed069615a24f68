// Chrome-trace (Perfetto) timeline of one rank: compute and communication spans, so pipeline
// bubbles and communication stalls can be seen (open the JSON in ui.perfetto.dev).
//
//   Tracer tracer(/*rank=*/2, /*enabled=*/true);
//   { TraceSpan s(tracer, "F3", "compute"); run_forward(3); }     // one "X" event
//   { TraceSpan s(tracer, "recv act", "comm"); recv(); }
//   tracer.write("trace.rank2.json");   // {"traceEvents": [{"name": "F3", "cat": "compute", "ph": "X",
//                                       //   "ts": 12.0, "dur": 345.0, "pid": 2, "tid": 0}, ...]}
//   TraceSummary s = tracer.summary();  // busy seconds per category over the traced window
// Timestamps are microseconds since the tracer was created. Categories: "compute", "comm",
// "optimizer" (anything else is allowed). A disabled tracer records nothing (spans cost one branch).
// Thread-safe: spans may be recorded from several threads (tid = a small per-thread index).
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hspmd::runtime {

struct TraceEvent {
  std::string name;
  std::string category;
  double start_us = 0;
  double duration_us = 0;
  int tid = 0;
};

struct TraceSummary {
  double window_seconds = 0;                  // first span start to last span end
  std::map<std::string, double> seconds;      // busy time per category (overlaps within one category merged)
  // seconds[c] / window_seconds, 0 when the window is empty.
  double share(const std::string& category) const;
};

class Tracer {
 public:
  explicit Tracer(int rank = 0, bool enabled = false);
  bool enabled() const { return enabled_; }
  // Microseconds since construction.
  double now_us() const;
  void record(const std::string& name, const std::string& category, double start_us, double end_us);
  std::vector<TraceEvent> events() const;
  TraceSummary summary() const;
  // Writes the Chrome-trace JSON atomically; Error naming the path on failure.
  void write(const std::string& path) const;
  void clear();

 private:
  int rank_;
  bool enabled_;
  std::chrono::steady_clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<TraceEvent> events_;
  // Recording threads in order of their first span: the first is tid 0, the next tid 1, ...
  std::map<std::thread::id, int> thread_index_;
};

// Records [construction, destruction) as one span.
class TraceSpan {
 public:
  TraceSpan(Tracer& tracer, std::string name, std::string category);
  ~TraceSpan();
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  Tracer& tracer_;
  std::string name_, category_;
  double start_us_ = 0;
};

}  // namespace hspmd::runtime
