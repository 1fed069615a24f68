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

Work WorkQueue::submit(std::string what, std::function<void()> task) {
  auto state = std::make_shared<detail::WorkState>();
  state->what = std::move(what);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.emplace_back(state, std::move(task));
  }
  cv_.notify_all();
  return Work(state);
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
    }
    std::exception_ptr error;
    try {
      item.second();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(item.first->mutex);
      item.first->done = true;
      item.first->error = error;
    }
    item.first->done_cv.notify_all();
  }
}

}  // namespace hspmd::comm
