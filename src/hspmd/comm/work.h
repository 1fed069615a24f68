// Work: the handle of an asynchronous communication operation (c10d Work.hpp). Operations of one
// communicator run in submission order on its worker thread; wait() blocks until this one is
// done and rethrows its error, so communication can overlap with compute:
//
//   Work w = comm.allreduce({.data = CommBuffer::of(grad)});  // returns at once
//   compute_next_layer();                                      // overlaps the allreduce
//   w.wait();                                                  // throws Error if it failed
//
// Buffers handed to an operation must stay alive and untouched until its wait() returns.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "hspmd/comm/store.h"

namespace hspmd::comm {

namespace detail {
struct WorkState {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::exception_ptr error;
  std::string what;  // "allreduce on group [0,1] gen 0", for timeout messages
};
}  // namespace detail

class Work {
 public:
  Work() = default;  // an already completed, empty operation
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}

  // Waits for completion; rethrows the operation's error (an hspmd::Error naming op and group).
  // The operation itself is bounded by its communicator's timeout, so this never hangs forever.
  void wait();
  // Waits at most timeout; throws Error naming the operation if it is still running then.
  void wait(Millis timeout);
  bool done() const;

 private:
  std::shared_ptr<detail::WorkState> state_;
};

// One worker thread running submitted tasks in order; each task completes its Work.
class WorkQueue {
 public:
  WorkQueue();
  ~WorkQueue();  // finishes queued tasks, then joins the thread
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues task; `what` names the operation in errors. An exception thrown by task becomes the
  // Work's error.
  Work submit(std::string what, std::function<void()> task);
  // Completes the running task's Work and every queued one with Error(reason) at once, so their
  // waiters return now; queued tasks are dropped and later submissions fail alike. The running
  // task still finishes on the worker thread (its result is then ignored).
  void abort(const std::string& reason);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<detail::WorkState>, std::function<void()>>> tasks_;
  bool stopping_ = false;
  std::string aborted_;                            // non-empty once abort() was called
  std::shared_ptr<detail::WorkState> running_;     // the task on the worker thread, if any
  std::thread thread_;
};

}  // namespace hspmd::comm
