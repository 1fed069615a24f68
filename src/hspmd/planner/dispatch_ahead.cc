#include "hspmd/planner/dispatch_ahead.h"

#include <chrono>
#include <cstdio>
#include <sstream>

#include "hspmd/core/elapsed.h"

namespace hspmd::planner {

std::vector<std::vector<std::vector<data::Segment>>> DispatchDecision::split(
    const std::vector<data::Segment>& global) const {
  HSPMD_CHECK(global.size() == segments.size())
      << "dispatch of step " << step << " was made for a batch of " << segments.size() << " segments, the trainer read "
      << global.size() << "; the look-ahead's data stream diverged from the trainer's";
  for (size_t i = 0; i < global.size(); ++i) {
    HSPMD_CHECK(global[i].document == segments[i].first && global[i].begin == segments[i].second)
        << "dispatch of step " << step << ": segment " << i << " is document " << global[i].document << " at "
        << global[i].begin << ", the look-ahead read document " << segments[i].first << " at " << segments[i].second;
  }
  std::vector<std::vector<std::vector<data::Segment>>> out;
  for (const auto& pipeline : choice.dispatch.micro_batches) {
    auto& p = out.emplace_back();
    for (const auto& mb : pipeline) {
      auto& m = p.emplace_back();
      for (size_t i : mb) m.push_back(global[i]);
    }
  }
  return out;
}

std::string DispatchDecision::to_string(const LengthStrategies& set) const {
  std::ostringstream out;
  char head[96];
  std::snprintf(head, sizeof head, "dispatch step %lld: strategy ", static_cast<long long>(step));
  out << head << set.at(strategy).strategy.name << " (predicted";
  for (size_t i = 0; i < choice.predicted.size(); ++i) {
    char part[128];
    if (choice.predicted[i] < 0) {
      std::snprintf(part, sizeof part, "%s %s cannot hold it", i ? ";" : "", set.at(i).strategy.name.c_str());
    } else {
      std::snprintf(part, sizeof part, "%s %s %.4g s", i ? ";" : "", set.at(i).strategy.name.c_str(),
                    choice.predicted[i]);
    }
    out << part;
  }
  char tail[128];
  std::snprintf(tail, sizeof tail, "; switch %.4g s, idle %.0f%%; decided %lld step(s) ahead in %.2f ms) | ",
                choice.switch_seconds, 100 * choice.dispatch.idle_share(), static_cast<long long>(ahead),
                1e3 * decide_seconds);
  out << tail << choice.dispatch.to_string();
  return out.str();
}

DispatchAhead::DispatchAhead(const data::TokenDataset& dataset, data::LoaderOptions options, data::LoaderState state,
                             const LengthStrategies& strategies, size_t current, int depth, int64_t first_step)
    : loader_(dataset, options, state),
      strategies_(strategies),
      current_(current),
      depth_(std::max(depth, 1)),
      step_(first_step) {
  thread_ = std::thread([this] { run(); });
}

DispatchAhead::~DispatchAhead() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void DispatchAhead::run() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || (!error_ && static_cast<int>(ready_.size()) < depth_); });
      if (stop_) return;
    }
    try {
      const auto start = std::chrono::steady_clock::now();
      const std::vector<data::Segment> batch = loader_.next();
      DispatchDecision d;
      d.step = step_++;
      std::vector<int64_t> lengths;
      for (const data::Segment& s : batch) {
        lengths.push_back(static_cast<int64_t>(s.tokens.size()));
        d.segments.emplace_back(s.document, s.begin);
      }
      d.choice = strategies_.choose(lengths, current_);
      d.strategy = d.choice.strategy;
      current_ = d.strategy;
      d.decide_seconds = seconds_since(start);
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.push_back(std::move(d));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
    }
    changed_.notify_all();
  }
}

DispatchDecision DispatchAhead::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !ready_.empty() || error_; });
  if (ready_.empty()) std::rethrow_exception(error_);
  DispatchDecision d = std::move(ready_.front());
  d.ahead = static_cast<int64_t>(ready_.size());
  ready_.pop_front();
  lock.unlock();
  changed_.notify_all();
  return d;
}

}  // namespace hspmd::planner
