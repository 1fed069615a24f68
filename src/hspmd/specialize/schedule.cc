#include "hspmd/specialize/schedule.h"

#include <algorithm>
#include <sstream>

#include "hspmd/core/error.h"

namespace hspmd::specialize {

std::string_view schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::k1F1B:
      return "1f1b";
  }
  return "?";
}

ScheduleKind parse_schedule_kind(std::string_view text) {
  if (text == "gpipe") return ScheduleKind::kGPipe;
  if (text == "1f1b") return ScheduleKind::k1F1B;
  HSPMD_THROW() << "unknown schedule '" << text << "': expected 'gpipe' or '1f1b'";
}

std::vector<Task> gpipe_schedule(int num_micro_batches) {
  HSPMD_CHECK(num_micro_batches >= 1) << "gpipe_schedule: num_micro_batches must be >= 1, got " << num_micro_batches;
  std::vector<Task> out;
  for (int m = 0; m < num_micro_batches; ++m) out.push_back({true, m});
  for (int m = 0; m < num_micro_batches; ++m) out.push_back({false, m});
  return out;
}

std::vector<Task> one_f_one_b_schedule(int num_micro_batches, int num_stages, int stage) {
  HSPMD_CHECK(num_micro_batches >= 1) << "1f1b schedule: num_micro_batches must be >= 1, got " << num_micro_batches;
  HSPMD_CHECK(num_stages >= 1 && stage >= 0 && stage < num_stages)
      << "1f1b schedule: stage " << stage << " is not one of " << num_stages << " stages";
  const int n = num_micro_batches;
  // Stage s must have S - s forwards in flight before its first backward can arrive from the
  // last stage: S - s - 1 warm-up forwards, then each steady step adds one forward and retires one
  // backward. With fewer micro-batches than that, the warm-up simply runs them all.
  const int warmup = std::min(num_stages - stage - 1, n);
  std::vector<Task> out;
  int next_f = 0, next_b = 0;
  for (; next_f < warmup; ++next_f) out.push_back({true, next_f});
  while (next_f < n) {
    out.push_back({true, next_f++});
    out.push_back({false, next_b++});
  }
  while (next_b < n) out.push_back({false, next_b++});
  return out;
}

std::vector<Task> make_schedule(ScheduleKind kind, int num_micro_batches, int num_stages, int stage) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      HSPMD_CHECK(num_stages >= 1 && stage >= 0 && stage < num_stages)
          << "gpipe schedule: stage " << stage << " is not one of " << num_stages << " stages";
      return gpipe_schedule(num_micro_batches);
    case ScheduleKind::k1F1B:
      return one_f_one_b_schedule(num_micro_batches, num_stages, stage);
  }
  HSPMD_THROW() << "unknown schedule kind";
}

int max_in_flight(const std::vector<Task>& schedule) {
  int live = 0, most = 0;
  for (const Task& t : schedule) {
    live += t.forward ? 1 : -1;
    most = std::max(most, live);
  }
  return most;
}

std::string to_string(const std::vector<Task>& schedule) {
  std::ostringstream out;
  for (size_t i = 0; i < schedule.size(); ++i) {
    out << (i ? " " : "") << (schedule[i].forward ? 'F' : 'B') << schedule[i].micro_batch;
  }
  return out.str();
}

std::string to_short_string(const std::vector<Task>& schedule, size_t max_tasks) {
  if (schedule.size() <= max_tasks) return to_string(schedule);
  const size_t n = schedule.size();
  auto name = [](const Task& t) { return std::string(t.forward ? "F" : "B") + std::to_string(t.micro_batch); };
  // Length of the steady 1F1B alternation F(m) B(k), F(m+1) B(k+1), ... starting at i.
  auto steady = [&](size_t i) {
    size_t j = i;
    while (j + 1 < n && schedule[j].forward && !schedule[j + 1].forward &&
           (j == i || (schedule[j].micro_batch == schedule[j - 2].micro_batch + 1 &&
                       schedule[j + 1].micro_batch == schedule[j - 1].micro_batch + 1))) {
      j += 2;
    }
    return j - i;
  };
  std::string out;
  for (size_t i = 0; i < n;) {
    out += i ? ", " : "";
    if (const size_t len = steady(i); len >= 4) {  // at least two pairs
      out += "1F1B " + name(schedule[i]) + " " + name(schedule[i + 1]) + ".." + name(schedule[i + len - 2]) + " " +
             name(schedule[i + len - 1]);
      i += len;
      continue;
    }
    // A run of one direction with consecutive micro-batches, up to where a steady phase starts.
    size_t j = i + 1;
    while (j < n && schedule[j].forward == schedule[i].forward &&
           schedule[j].micro_batch == schedule[j - 1].micro_batch + 1 && steady(j) < 4) {
      ++j;
    }
    if (j - i >= 3) {
      out += name(schedule[i]) + ".." + name(schedule[j - 1]);
    } else {
      for (size_t k = i; k < j; ++k) out += (k > i ? " " : "") + name(schedule[k]);
    }
    i = j;
  }
  return out;
}

}  // namespace hspmd::specialize
