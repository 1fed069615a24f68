// Micro-batch schedules of one pipeline stage: the order in which a stage runs the forward (F) and
// backward (B) passes of its micro-batches in one step. Each pipeline has its own micro-batch
// count, so stages of different pipelines get different schedules.
//
//   GPipe: every forward, then every backward (activations of all micro-batches alive at once):
//     gpipe_schedule(4)                    F0 F1 F2 F3 B0 B1 B2 B3
//   1F1B (PipeDream-flush): stage s of S runs min(S - s - 1, n) warm-up forwards, then alternates
//   one forward and one backward, then drains the remaining backwards, so at most S - s
//   micro-batches are in flight on stage s:
//     one_f_one_b_schedule(4, /*num_stages=*/3, /*stage=*/0)   F0 F1 F2 B0 F3 B1 B2 B3
//     one_f_one_b_schedule(4, 3, 2)                            F0 B0 F1 B1 F2 B2 F3 B3
// Both are deadlock-free with deferred sends (runtime/reshard_exec.h): B(m) of stage s only waits
// for B(m) of stage s+1, F(m) only for F(m) of stage s-1.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hspmd::specialize {

enum class ScheduleKind { kGPipe, k1F1B };
std::string_view schedule_kind_name(ScheduleKind kind);  // "gpipe", "1f1b"
// "gpipe" or "1f1b"; Error listing both otherwise.
ScheduleKind parse_schedule_kind(std::string_view text);

struct Task {
  bool forward = true;
  int micro_batch = 0;
  friend bool operator==(const Task&, const Task&) = default;
};

std::vector<Task> gpipe_schedule(int num_micro_batches);
std::vector<Task> one_f_one_b_schedule(int num_micro_batches, int num_stages, int stage);
std::vector<Task> make_schedule(ScheduleKind kind, int num_micro_batches, int num_stages, int stage);
// Most micro-batches whose forward ran and backward did not, at any point (activation memory).
int max_in_flight(const std::vector<Task>& schedule);
// "F0 F1 B0 B1"
std::string to_string(const std::vector<Task>& schedule);
// to_string when it has at most `max_tasks` tasks; otherwise abbreviated by phases: a run of
// forwards (or backwards) with consecutive micro-batches becomes "F0..F2", the steady alternation
// of 1F1B "1F1B F3 B0..F31 B28":
//   one_f_one_b_schedule(32, 4, 0)  ->  "F0..F2, 1F1B F3 B0..F31 B28, B29..B31"
//   gpipe_schedule(32)              ->  "F0..F31, B0..B31"
std::string to_short_string(const std::vector<Task>& schedule, size_t max_tasks = 8);

}  // namespace hspmd::specialize
