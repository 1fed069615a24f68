// Helpers for comm tests: N ranks as N threads in one process over a fresh file store, the
// closed-form data every collective check uses, a full collective check shared by the thread
// tests and the worker processes of the dist tests, and subprocesses for the dist tests.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hspmd/comm/group_cache.h"
#include "hspmd/comm/store.h"
#include "hspmd/core/tensor.h"

namespace hspmd::comm::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs body(rank, groups) on `world` threads; each rank has its own GroupCache (Gloo backend with
// `timeout`) over one shared file store. Rethrows the first exception any rank raised, prefixed
// with its rank.
// make_backend(rank), when given, replaces the Gloo backend (e.g. NCCL on GPU `rank`).
void run_ranks(int world, const std::function<void(int rank, GroupCache& groups)>& body,
               Millis timeout = Millis(10'000), const std::function<Backend(int rank)>& make_backend = nullptr);

// Rank r's element i: value(r, i) = (r + 1) + (i % 5); small integers, exact in every dtype.
double value(int rank, int64_t i);
// n elements value(rank, offset + i) in dtype.
Tensor input(int rank, int64_t n, DType dtype, int64_t offset = 0);
// Sum of value(r, i) over members.
double sum_value(const std::vector<int>& members, int64_t i);
std::vector<int> iota(int n);

// A batched send/receive pattern: message k from src to dst has n elements
// message_value(src, dst, k, i). Random but identical on every rank for one seed; includes
// messages to self, several per pair and empty ones.
struct P2PPattern {
  struct Message {
    int src, dst, k;
    int64_t n;
  };
  std::vector<Message> messages;
};
P2PPattern random_pattern(int world, uint32_t seed);
float message_value(int src, int dst, int k, int64_t i);
// Runs `pattern` on `ranks` (group members, global ranks; pattern indices map to ranks[i]) and
// throws Error on the first wrong element.
void check_send_recv(Communicator& comm, const P2PPattern& pattern);

// Every collective, every dtype, odd and uneven counts, on the world group and on subgroups that
// exclude some ranks, plus a random many-to-many send/receive; throws Error naming the op,
// dtype and element at the first wrong value. Ranks outside a subgroup skip it.
void check_collectives(int rank, int world, GroupCache& groups);

// A child process with stdout and stderr merged into one pipe the test reads.
class Subprocess {
 public:
  Subprocess(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env = {});
  ~Subprocess();  // SIGKILLs the process if it still runs
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // Reads output until `text` has appeared or timeout passed; returns whether it appeared.
  bool wait_for_output(const std::string& text, Millis timeout);
  // Waits for exit (SIGKILL after timeout); returns the exit status, 128 + signal when killed
  // by one, -1 after a timeout.
  int finish(Millis timeout);
  const std::string& output() const { return output_; }

 private:
  int read_some(Millis timeout);  // 1: read data, 0: nothing within timeout, -1: EOF

  pid_t pid_ = -1;
  int fd_ = -1;
  bool exited_ = false;
  std::string output_;
};

// Path of a built binary: $HSPMD_BINARY_DIR/name (ctest sets it). Throws Error when unset.
std::string binary_path(const std::string& name);

}  // namespace hspmd::comm::testing
