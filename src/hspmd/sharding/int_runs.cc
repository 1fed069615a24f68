#include "hspmd/sharding/int_runs.h"

#include <algorithm>

#include "hspmd/core/append_number.h"

namespace hspmd::sharding {

std::string runs_text(const std::vector<int>& values, std::string_view sep) {
  std::string out;
  append_runs_text(out, values, sep);
  return out;
}

void append_runs_text(std::string& out, const std::vector<int>& values, std::string_view sep) {
  for (size_t i = 0; i < values.size();) {
    // The longest run from i with the step to its neighbour; a step > 1 pays off from 3 values on.
    size_t j = i;
    const long long step = i + 1 < values.size() ? static_cast<long long>(values[i + 1]) - values[i] : 0;
    if (step >= 1) {
      while (j + 1 < values.size() && static_cast<long long>(values[j + 1]) - values[j] == step) ++j;
      if (step > 1 && j - i < 2) j = i;
    }
    if (i > 0) out += ',';
    append_number(out, values[i]);
    if (j > i) {
      out += sep;
      append_number(out, values[j]);
      if (step > 1) {
        out += '/';
        append_number(out, step);
      }
    }
    i = j + 1;
  }
}

RunIndex::RunIndex(const std::vector<int>& values) {
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1) ++j;
    runs_.push_back({values[i], static_cast<int>(j - i + 1), static_cast<int>(i)});
    i = j + 1;
  }
  std::sort(runs_.begin(), runs_.end(), [](const Run& a, const Run& b) { return a.first < b.first; });
  // Two overlapping runs overlap a neighbour in this order: every run starting between them starts
  // inside the first.
  for (size_t k = 1; k < runs_.size(); ++k) {
    const Run& before = runs_[k - 1];
    if (runs_[k].first < before.first + before.length) {
      repeated_ = runs_[k].first;
      break;
    }
  }
}

int RunIndex::position(int value) const {
  auto after = std::upper_bound(runs_.begin(), runs_.end(), value, [](int v, const Run& r) { return v < r.first; });
  if (after == runs_.begin()) return -1;
  const Run& run = *(after - 1);
  return value < run.first + run.length ? run.position + (value - run.first) : -1;
}

}  // namespace hspmd::sharding
