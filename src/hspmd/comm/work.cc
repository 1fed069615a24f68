#include "hspmd/comm/work.h"

#include "hspmd/core/error.h"

namespace hspmd::comm {

void Work::wait() {
  if (!state_) return;
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->done_cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

void Work::wait(Millis timeout) {
  if (!state_) return;
  std::unique_lock<std::mutex> lock(state_->mutex);
  bool finished = state_->done_cv.wait_for(lock, timeout, [&] { return state_->done; });
  HSPMD_CHECK(finished) << state_->what << " did not complete within " << timeout.count() << " ms";
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::done() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

WorkQueue::WorkQueue() : thread_([this] { run(); }) {}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

namespace {

// Marks a Work done with `error` unless it already is (an aborted task may finish later).
void complete(detail::WorkState& state, std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    if (state.done) return;
    state.done = true;
    state.error = error;
  }
  state.done_cv.notify_all();
}

std::exception_ptr aborted_error(const detail::WorkState& state, const std::string& reason) {
  return std::make_exception_ptr(Error(state.what + " aborted: " + reason));
}

}  // namespace

Work WorkQueue::submit(std::string what, std::function<void()> task) {
  auto state = std::make_shared<detail::WorkState>();
  state->what = std::move(what);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_.empty()) {
      tasks_.emplace_back(state, std::move(task));
      cv_.notify_all();
      return Work(state);
    }
  }
  complete(*state, aborted_error(*state, aborted_));
  return Work(state);
}

void WorkQueue::abort(const std::string& reason) {
  std::vector<std::shared_ptr<detail::WorkState>> failed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = reason.empty() ? "aborted" : reason;
    if (running_) failed.push_back(running_);
    for (auto& [state, task] : tasks_) failed.push_back(state);
    tasks_.clear();
  }
  for (const auto& state : failed) complete(*state, aborted_error(*state, reason));
}

void WorkQueue::run() {
  while (true) {
    std::pair<std::shared_ptr<detail::WorkState>, std::function<void()>> item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping and drained
      item = std::move(tasks_.front());
      tasks_.pop_front();
      running_ = item.first;
    }
    std::exception_ptr error;
    try {
      item.second();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      running_.reset();
    }
    complete(*item.first, error);
  }
}

}  // namespace hspmd::comm
