// A communication thread: runs the jobs handed to it one at a time, in the order they were handed
// over, while the thread that handed them goes on computing. The trainer's gradient sync runs its
// buckets here (runtime/bucketed_gradient_sync.h) so they overlap with the backward pass.
//
//   CommThread comm("rank 2");
//   comm.submit([&] { reduce(bucket0); });   // returns at once
//   ... compute ...
//   comm.wait();                             // every job done; rethrows the first job's error
//
// A job's ticket (what submit() returns) lets the caller wait for that job alone: jobs run in
// submission order, so wait_for(t) returns once every job up to t has run. ZeRO-3's parameter
// gathers wait so for the layer they need while the later layers' gathers go on.
//
// Errors: a job that throws stops the thread's work: the jobs queued behind it are dropped (they
// would communicate with peers the failure has already desynchronized) and the next submit() or
// wait() throws Error naming the owner, "the communication thread" and the job's message. So an
// aborted communicator (elastic recovery) or a --comm-timeout on the thread surfaces on the main
// thread at its next handoff, never as a hang: every job's communication is bounded by its
// communicator's timeout.
//
// Inline (`threaded` = false) runs each job inside submit(), on the caller's thread, its errors
// thrown as they are: the sync without overlap, through the same code.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace hspmd::runtime {

class CommThread {
 public:
  // `owner` names the thread in errors ("rank 2").
  explicit CommThread(std::string owner, bool threaded = true);
  // Drops queued jobs and waits for the running one (bounded by its communicator's timeout).
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  bool threaded() const { return threaded_; }
  // Queues `job` (or runs it now, inline) and returns its ticket. Throws the error of an earlier
  // job instead, if any.
  uint64_t submit(std::function<void()> job);
  // Returns once the job of `ticket` and those before it have run; throws the first job's error, as
  // wait() does. A job dropped after an error counts as run (the error is thrown once, by
  // whichever call comes first).
  void wait_for(uint64_t ticket);
  // Returns once every job handed over has run; throws the first job's error (once: the thread is
  // usable again afterwards).
  void wait();
  // After a failure on the caller's side: drops the queued jobs, waits for the running one and
  // forgets any error, so the caller can settle its state alone.
  void abandon();

 private:
  void loop();
  void drop_queue_locked();  // dropped jobs count as finished: their waiters see the error instead
  [[noreturn]] void rethrow_locked(std::unique_lock<std::mutex>& lock);

  std::string owner_;
  bool threaded_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> queue_;
  bool running_ = false;  // a job is executing (its lock released)
  uint64_t submitted_ = 0;  // tickets handed out
  uint64_t finished_ = 0;   // jobs run or dropped, in submission order
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace hspmd::runtime
