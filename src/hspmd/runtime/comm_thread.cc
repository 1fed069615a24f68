#include "hspmd/runtime/comm_thread.h"

#include <utility>

#include "hspmd/core/error.h"

namespace hspmd::runtime {

namespace {

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an unknown exception";
  }
}

}  // namespace

CommThread::CommThread(std::string owner, bool threaded) : owner_(std::move(owner)), threaded_(threaded) {
  if (threaded_) thread_ = std::thread([this] { loop(); });
}

CommThread::~CommThread() {
  if (!threaded_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    drop_queue_locked();
  }
  changed_.notify_all();
  thread_.join();
}

uint64_t CommThread::submit(std::function<void()> job) {
  if (!threaded_) {  // the caller's own work: its errors are its own
    job();
    return ++submitted_;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (error_) rethrow_locked(lock);
  queue_.push_back(std::move(job));
  const uint64_t ticket = ++submitted_;
  lock.unlock();
  changed_.notify_all();
  return ticket;
}

void CommThread::wait_for(uint64_t ticket) {
  if (!threaded_) return;  // ran in submit()
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return finished_ >= ticket || error_; });
  if (error_) rethrow_locked(lock);
}

void CommThread::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return (queue_.empty() && !running_) || error_; });
  // After an error the queue is dropped, but the failing job may still be unwinding.
  changed_.wait(lock, [&] { return !running_; });
  if (error_) rethrow_locked(lock);
}

void CommThread::abandon() {
  std::unique_lock<std::mutex> lock(mutex_);
  drop_queue_locked();
  changed_.wait(lock, [&] { return !running_; });
  error_ = nullptr;
}

void CommThread::drop_queue_locked() {
  finished_ += queue_.size();
  queue_.clear();
}

void CommThread::rethrow_locked(std::unique_lock<std::mutex>& lock) {
  const std::string message = message_of(error_);
  error_ = nullptr;
  lock.unlock();
  throw Error(owner_ + ": the communication thread failed: " + message);
}

void CommThread::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    std::function<void()> job = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    std::exception_ptr failed;
    try {
      job();
    } catch (...) {
      failed = std::current_exception();
    }
    job = nullptr;  // whatever the job held (buffers, tensors) is released before waiters wake
    lock.lock();
    running_ = false;
    ++finished_;
    if (failed) {
      if (!error_) error_ = failed;
      drop_queue_locked();
    }
    changed_.notify_all();
  }
}

}  // namespace hspmd::runtime
