#include "hspmd/comm/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>

#include "hspmd/comm/communicator.h"
#include "hspmd/comm/heartbeat.h"
#include "hspmd/comm/prefix_store.h"
#include "hspmd/comm/run_watch.h"
#include "hspmd/comm/store_values.h"
#include "hspmd/core/error.h"

namespace hspmd::comm {

namespace {

using Clock = std::chrono::steady_clock;

// Writes all of text to fd (one write per line keeps lines of different workers whole).
void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own stdout is gone: nothing sensible left to do with the output
    done += static_cast<size_t>(n);
  }
}

void say(const std::string& message) { write_all(2, "hspmd launch: " + message + "\n"); }

std::string random_run_id() {
  std::random_device rd;
  std::ostringstream s;
  s << std::hex << rd() << rd();
  return s.str();
}

// One output stream of one worker, split into prefixed lines.
struct Stream {
  int fd = -1;      // read end of the worker's pipe; -1 once closed
  int out_fd = 1;   // where prefixed lines go
  std::string pending;
};

struct Worker {
  int rank = 0;
  int restarts = 0;  // times this rank was restarted before this incarnation
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  Stream out, err;
  // Fencing (elastic): what the store said about this incarnation.
  bool member = false;                     // some agreed generation listed it (the first incarnation is)
  bool fenced = false;                     // the launcher killed it for the run
  Clock::time_point started_at{};
  bool beat_read = false;                  // a reading begun after it started has seen its hb/<rank>
  std::optional<std::string> first_beat;   // hb/<rank> in that reading (a restart's is stale)
  std::optional<std::string> last_beat;
  bool beating = false;                    // its heartbeat moved since it started
  Clock::time_point beat_changed{};
};

void forward_lines(Stream& s, const std::string& prefix, bool at_eof) {
  size_t start = 0, nl;
  while ((nl = s.pending.find('\n', start)) != std::string::npos) {
    write_all(s.out_fd, prefix + s.pending.substr(start, nl - start + 1));
    start = nl + 1;
  }
  s.pending.erase(0, start);
  if (at_eof && !s.pending.empty()) {
    write_all(s.out_fd, prefix + s.pending + "\n");
    s.pending.clear();
  }
}

// Reads what is available from s; closes it at EOF.
void drain(Stream& s, const std::string& prefix) {
  char buf[65536];
  ssize_t n = ::read(s.fd, buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    forward_lines(s, prefix, true);
    ::close(s.fd);
    s.fd = -1;
    return;
  }
  s.pending.append(buf, static_cast<size_t>(n));
  forward_lines(s, prefix, false);
}

// Child side of fork: never returns.
[[noreturn]] void exec_worker(const LaunchOptions& options, const std::vector<std::pair<std::string, std::string>>& env,
                              int out_fd, int err_fd, const sigset_t& old_mask) {
  ::setpgid(0, 0);
  ::dup2(out_fd, 1);
  ::dup2(err_fd, 2);
  for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  std::vector<char*> argv;
  for (const auto& a : options.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  std::string msg = "hspmd launch: cannot run '" + options.command[0] + "': " + std::strerror(errno) + "\n";
  write_all(2, msg);
  ::_exit(127);
}

class Supervisor {
 public:
  explicit Supervisor(const LaunchOptions& options) : options_(options) {}

  int run();

 private:
  void start_workers(const std::string& store_url, const std::string& run_id, const sigset_t& old_mask);
  // Starts (or restarts) local worker `local`; its earlier incarnation, if any, must have exited.
  void start_worker(int local, int restarts);
  void reap();
  void on_worker_exit(Worker& w);
  void stop_all(int signal, int exit_code, const std::string& why);
  void signal_running(int signal);
  bool all_done() const;
  // Elastic: fences local workers the run has declared dead, and kills them all when the store has
  // been out of reach for the heartbeat timeout (launcher.h), from the watch's newest reading.
  void watch_run();
  void fence(Worker& w, const std::string& why);
  // When the host counts as cut off unless a reading gets through first.
  Clock::time_point cut_off_deadline() const { return reading_.read_at + options_.heartbeat_timeout; }
  // The newest reading failed, or none has got through for a quarter of the heartbeat timeout
  // (a call hangs on a cut link for the store's I/O bound before it fails).
  bool store_out_of_reach() const;
  // Elastic, every worker gone without success while the store is out of reach (cut off too, they
  // may have stopped themselves first): the launcher waits for its own verdict, the store within
  // reach again or the cut-off at the deadline.
  bool awaiting_store_verdict() const;

  const LaunchOptions& options_;
  std::vector<Worker> workers_;  // by local rank: the current incarnation
  std::vector<Worker> retired_;  // earlier incarnations whose output is still draining
  std::string store_url_, run_id_;
  sigset_t old_mask_{};
  std::shared_ptr<Store> run_store_;
  bool stopping_ = false;
  Clock::time_point kill_deadline_;
  bool killed_ = false;
  int exit_code_ = 0;
  // Elastic runs: success when any worker finished cleanly, else the first failure's code.
  bool any_success_ = false;
  int first_failure_ = 0;
  // Fencing state (elastic).
  std::unique_ptr<RunWatch> watch_;  // reads the store and publishes deaths, off this thread
  RunWatch::Reading reading_;        // its newest reading
  std::vector<bool> rejoins_;        // by local rank: an earlier incarnation of the rank ran in this run
  int fenced_exits_ = 0, failed_exits_ = 0;
};

void Supervisor::start_workers(const std::string& store_url, const std::string& run_id, const sigset_t& old_mask) {
  store_url_ = store_url;
  run_id_ = run_id;
  old_mask_ = old_mask;
  workers_.resize(options_.nproc);
  for (int local = 0; local < options_.nproc; ++local) start_worker(local, 0);
}

void Supervisor::start_worker(int local, int restarts) {
  const int world = options_.nproc * options_.nnodes;
  Worker w;
  w.rank = options_.node_rank * options_.nproc + local;
  w.restarts = restarts;
  int out_pipe[2], err_pipe[2];
  HSPMD_CHECK(::pipe2(out_pipe, O_CLOEXEC) == 0 && ::pipe2(err_pipe, O_CLOEXEC) == 0)
      << "pipe for rank " << w.rank << ": " << std::strerror(errno);
  std::vector<std::pair<std::string, std::string>> env = {
      {"RANK", std::to_string(w.rank)},          {"WORLD_SIZE", std::to_string(world)},
      {"LOCAL_RANK", std::to_string(local)},     {"LOCAL_WORLD_SIZE", std::to_string(options_.nproc)},
      {"HSPMD_STORE", store_url_},               {"HSPMD_RUN_ID", run_id_},
      // A rank whose earlier incarnation ran on a host launched before (this host started again)
      // is a restart too: it asks the running workers to admit it.
      {"HSPMD_RESTART_COUNT", std::to_string(restarts + (rejoins_[local] ? 1 : 0))}};
  if (!options_.host.empty()) env.emplace_back("HSPMD_HOST", options_.host);
  pid_t pid = ::fork();
  HSPMD_CHECK(pid >= 0) << "fork for rank " << w.rank << ": " << std::strerror(errno);
  if (pid == 0) exec_worker(options_, env, out_pipe[1], err_pipe[1], old_mask_);
  ::setpgid(pid, pid);  // also done by the child: whichever runs first wins the race
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  w.pid = pid;
  w.running = true;
  w.out = {out_pipe[0], 1, {}};
  w.err = {err_pipe[0], 2, {}};
  // A restart, or a rank of a host started again, is no member until admitted.
  w.member = restarts == 0 && !rejoins_[local];
  w.started_at = Clock::now();
  // The earlier incarnation's output streams may still be draining: keep them until they close.
  Worker& slot = workers_[local];
  if (slot.out.fd >= 0 || slot.err.fd >= 0) retired_.push_back(std::move(slot));
  slot = std::move(w);
}

void Supervisor::signal_running(int signal) {
  for (auto& w : workers_) {
    if (w.running) ::kill(-w.pid, signal);
  }
}

void Supervisor::stop_all(int signal, int exit_code, const std::string& why) {
  if (stopping_) return;
  say(why);
  stopping_ = true;
  exit_code_ = exit_code;
  kill_deadline_ = Clock::now() + options_.grace;
  signal_running(signal);
}

void Supervisor::on_worker_exit(Worker& w) {
  w.running = false;
  // Whatever the worker left behind in its process group goes with it.
  ::kill(-w.pid, SIGKILL);
  bool failed = !(WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0);
  any_success_ = any_success_ || !failed;
  if (failed) ++(w.fenced ? fenced_exits_ : failed_exits_);
  if (!failed || stopping_) return;
  std::string what = "rank " + std::to_string(w.rank) + (w.fenced ? " was fenced: " : " failed with ") +
                     describe_wait_status(w.status);
  int code = WIFEXITED(w.status) ? WEXITSTATUS(w.status) : 128 + WTERMSIG(w.status);
  if (!options_.elastic) {
    stop_all(SIGTERM, code, what + "; stopping the other workers");
    return;
  }
  int alive = 0;
  for (const auto& o : workers_) alive += o.running ? 1 : 0;
  say(what + "; --elastic: " + std::to_string(alive) + " local workers keep running");
  if (!store_out_of_reach()) {
    watch_->publish_death(w.rank, describe_wait_status(w.status));
  } else {  // a notice cannot get through; writing into a run this host may be cut off from is no use
    say("not publishing the death of rank " + std::to_string(w.rank) +
        ": the store is out of reach; the run learns it from the heartbeat timeout");
  }
  if (first_failure_ == 0 && !w.fenced) first_failure_ = code;  // a fenced one's SIGKILL came from here
  if (w.restarts < options_.max_restarts) {
    // The new incarnation joins the run at a step boundary (it reads HSPMD_RESTART_COUNT).
    const int local = w.rank - options_.node_rank * options_.nproc;
    say("restarting rank " + std::to_string(w.rank) + " (restart " + std::to_string(w.restarts + 1) + " of " +
        std::to_string(options_.max_restarts) + ")");
    start_worker(local, w.restarts + 1);
  }
}

void Supervisor::fence(Worker& w, const std::string& why) {
  say("fencing rank " + std::to_string(w.rank) + " (SIGKILL): " + why);
  w.fenced = true;
  ::kill(-w.pid, SIGKILL);
}

void Supervisor::watch_run() {
  if (!options_.elastic || stopping_) return;
  reading_ = watch_->take();
  for (const std::string& note : reading_.notes) say(note);
  // Each newly agreed generation: a running worker it leaves out is dead to the run.
  for (const auto& [generation, members] : reading_.generations) {
    for (auto& w : workers_) {
      if (!w.running || w.fenced) continue;
      if (std::binary_search(members.begin(), members.end(), w.rank)) {
        w.member = true;
      } else if (w.member) {
        fence(w, "the run agreed on generation " + std::to_string(generation) + " without it (members [" +
                     group_key(members) + "])");
      }
    }
  }
  // A worker whose heartbeat is silent for the timeout is dead by its peers' rule. Only readings
  // that got through count: a store out of reach is the cut-off below, not a silent worker.
  for (auto& w : workers_) {
    if (!w.running || w.fenced || reading_.read_at < w.started_at) continue;
    const std::optional<std::string>& beat = reading_.beats.at(w.rank);
    if (!w.beat_read) {
      w.beat_read = true;
      w.first_beat = w.last_beat = beat;
      w.beat_changed = reading_.read_at;
    } else if (beat != w.last_beat) {
      w.last_beat = beat;
      w.beat_changed = reading_.read_at;
      w.beating = w.beating || beat != w.first_beat;
    } else if (w.beating && reading_.read_at - w.beat_changed > options_.heartbeat_timeout) {
      fence(w, "its heartbeat has been silent for " +
                   std::to_string(std::chrono::duration_cast<Millis>(reading_.read_at - w.beat_changed).count()) +
                   " ms (stopped or hung), so the run counts it dead");
    }
  }
  const auto now = Clock::now();
  if (now < cut_off_deadline()) return;
  // Decided here and now, whatever store call the watch is stuck in; nothing more is written.
  stop_all(SIGKILL, kExitCutOff,
           "cannot reach the store " + run_store_->describe() + " for " +
               std::to_string(std::chrono::duration_cast<Millis>(now - reading_.read_at).count()) +
               " ms (heartbeat timeout " + std::to_string(options_.heartbeat_timeout.count()) + " ms; " +
               (reading_.error.empty() ? std::string("no reply") : reading_.error) +
               "): this host is cut off from the run, whose other members count its workers dead; killing them "
               "(fenced), exit code " + std::to_string(kExitCutOff));
}

bool Supervisor::store_out_of_reach() const {
  return !reading_.error.empty() || Clock::now() - reading_.read_at > options_.heartbeat_timeout / 4;
}

bool Supervisor::awaiting_store_verdict() const {
  return options_.elastic && !stopping_ && !any_success_ && store_out_of_reach();
}

void Supervisor::reap() {
  while (true) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    for (auto& w : workers_) {
      if (w.pid == pid && w.running) {
        w.status = status;
        on_worker_exit(w);
      }
    }
  }
}

bool Supervisor::all_done() const {
  for (const auto* list : {&workers_, &retired_}) {
    for (const auto& w : *list) {
      if (w.running || w.out.fd >= 0 || w.err.fd >= 0) return false;
    }
  }
  return true;
}

int Supervisor::run() {
  HSPMD_CHECK(options_.nproc >= 1) << "launch: -n must be at least 1, got " << options_.nproc;
  HSPMD_CHECK(options_.nnodes >= 1) << "launch: --nnodes must be at least 1, got " << options_.nnodes;
  HSPMD_CHECK(options_.node_rank >= 0 && options_.node_rank < options_.nnodes)
      << "launch: --node-rank " << options_.node_rank << " is not in [0, " << options_.nnodes << ")";
  HSPMD_CHECK(!options_.command.empty()) << "launch: no worker command (put it after --)";
  HSPMD_CHECK(options_.nnodes == 1 || (!options_.run_id.empty() && !options_.store_url.empty()))
      << "launch: --nnodes " << options_.nnodes << " needs --run-id and --store shared by every node";
  std::string run_id = options_.run_id.empty() ? random_run_id() : options_.run_id;
  std::string store_url = options_.store_url;
  bool own_dir = false;
  if (store_url.empty()) {
    std::string dir = "/tmp/hspmd-" + run_id;
    own_dir = !std::filesystem::exists(dir);
    store_url = "file://" + dir;
  }
  // Opening the store here checks the URL before any worker starts.
  run_store_ = std::make_shared<PrefixStore>(open_store(store_url), "run/" + run_id + "/");
  rejoins_.assign(options_.nproc, false);
  if (options_.elastic) {
    int generation = 0;
    while (run_store_->try_get("gen" + std::to_string(generation + 1) + "/members")) ++generation;
    std::vector<int> ranks;
    for (int local = 0; local < options_.nproc; ++local) {
      const int rank = options_.node_rank * options_.nproc + local;
      ranks.push_back(rank);
      rejoins_[local] = run_store_->try_get(heartbeat_key(rank)).has_value();
    }
    watch_ = std::make_unique<RunWatch>(run_store_, ranks, generation, Millis(100));
    reading_ = watch_->take();
  }

  sigset_t mask, old_mask;
  sigemptyset(&mask);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&mask, s);
  HSPMD_CHECK(::sigprocmask(SIG_BLOCK, &mask, &old_mask) == 0) << "sigprocmask: " << std::strerror(errno);
  int sfd = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  try {
    HSPMD_CHECK(sfd >= 0) << "signalfd: " << std::strerror(errno);
    start_workers(store_url, run_id, old_mask);
  } catch (...) {
    signal_running(SIGKILL);
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    throw;
  }

  while (!all_done() || awaiting_store_verdict()) {
    std::vector<pollfd> fds{{sfd, POLLIN, 0}};
    std::vector<std::pair<Stream*, std::string>> streams;
    for (auto* list : {&workers_, &retired_}) {
      for (auto& w : *list) {
        for (Stream* s : {&w.out, &w.err}) {
          if (s->fd < 0) continue;
          fds.push_back({s->fd, POLLIN, 0});
          streams.emplace_back(s, "[rank " + std::to_string(w.rank) + "] ");
        }
      }
    }
    int timeout_ms = 200;
    if (watch_ && !stopping_) {  // wake for the cut-off deadline itself
      auto left = std::chrono::duration_cast<Millis>(cut_off_deadline() - Clock::now()).count() + 1;
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, 100));
    }
    if (stopping_ && !killed_) {
      auto left = std::chrono::duration_cast<Millis>(kill_deadline_ - Clock::now()).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, 200));
    }
    int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) break;
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(sfd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
        int sig = static_cast<int>(info.ssi_signo);
        if (sig == SIGCHLD) continue;  // reaped below
        if (stopping_) {
          signal_running(sig);  // a second Ctrl-C is passed on too
        } else {
          stop_all(sig, 128 + sig, std::string("received ") + strsignal(sig) + "; stopping the workers");
        }
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) drain(*streams[i - 1].first, streams[i - 1].second);
    }
    reap();
    watch_run();
    if (stopping_ && !killed_ && Clock::now() >= kill_deadline_) {
      bool any = false;
      for (const auto& w : workers_) any = any || w.running;
      if (any) say("workers still running after the grace period; sending SIGKILL");
      signal_running(SIGKILL);
      killed_ = true;
    }
  }
  ::close(sfd);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  if (options_.elastic && !stopping_) {
    exit_code_ = any_success_ ? 0 : first_failure_;
    if (!any_success_ && fenced_exits_ > 0 && failed_exits_ == 0) {
      say("every local worker was fenced: the run declared them dead; exit code " + std::to_string(kExitFenced));
      exit_code_ = kExitFenced;
    }
  }
  if (own_dir) {
    std::error_code ec;
    std::filesystem::remove_all(store_url.substr(7), ec);
  }
  return exit_code_;
}

}  // namespace

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  }
  return "wait status " + std::to_string(status);
}

int launch(const LaunchOptions& options) { return Supervisor(options).run(); }

}  // namespace hspmd::comm
