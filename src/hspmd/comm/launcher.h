// Launcher: starts and supervises the local worker processes of a run (`hspmd launch`).
//
//   hspmd launch -n 4 -- python train.py          # 4 workers, RANK 0..3 on this host
//   hspmd launch -n 4 --nnodes 2 --node-rank 1 --store redis://head:6379 --run-id exp7 -- cmd
//                                                  # ranks 4..7 of an 8-rank, 2-host run
//
// Each worker gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, HSPMD_STORE, HSPMD_RUN_ID
// (and HSPMD_HOST when given), runs in its own process group, and has every line of its stdout
// and stderr prefixed with "[rank N] ". Stopping: SIGINT/SIGTERM/SIGHUP to the launcher is
// forwarded to every worker's process group, then SIGKILL after the grace period. A worker that
// exits non-zero or by a signal makes the launcher stop the rest and return non-zero with a
// message naming the rank and its status/signal; with `elastic`, the survivors keep running
// and the death is published in the store as "dead/<rank>" (membership.h reads it), so they
// learn the new membership at once; with `max_restarts`, the dead worker is then started again
// (HSPMD_RESTART_COUNT=k in its environment, 0 for the first incarnation). A host launched again
// into a running elastic run (its ranks' heartbeats are in the store: they ran before) starts its
// workers as restarts too (HSPMD_RESTART_COUNT >= 1): they ask the running workers to admit them.
// A run id names one run: reusing one whose keys are still in the store makes the workers join it.
//
// Fencing (elastic): a worker the run has declared dead must never write to it again, even if it
// resumes (SIGCONT after SIGSTOP, a healed partition). The launcher watches the store (on a
// thread of its own, comm/run_watch.h) and SIGKILLs a local worker once (a) the survivors agreed
// on a generation without it, or (b) its heartbeat ("hb/<rank>") has been silent for
// `heartbeat_timeout`, the rule its peers declare it dead by. When no reading of the store has got
// through for `heartbeat_timeout` (counted from when the last one that did began), its host is cut
// off: the other side counts its workers dead, so it kills them all and exits with kExitCutOff,
// decided at that moment even while a store call hangs, and without writing to the store again
// (a death is published only while the store is within reach). A launcher therefore never waits
// forever on a worker that cannot make progress.
#pragma once

#include <string>
#include <vector>

#include "hspmd/comm/store.h"

namespace hspmd::comm {

struct LaunchOptions {
  int nproc = 1;            // workers on this host
  int nnodes = 1;           // hosts in the run
  int node_rank = 0;        // this host's index: its workers are ranks node_rank*nproc + local
  std::string store_url;    // empty: a file store in /tmp/hspmd-<run id> (one host only)
  std::string run_id;       // empty: a fresh random id (one host only)
  std::string host;         // HSPMD_HOST for the workers; empty: not set (127.0.0.1)
  bool elastic = false;     // survivors keep running when a worker dies
  int max_restarts = 0;     // elastic: a dead worker is started again this many times at most
                            // (HSPMD_RESTART_COUNT tells it; it then joins the running workers)
  Millis grace{5'000};      // SIGTERM -> SIGKILL delay when stopping workers
  // elastic: the workers' --heartbeat-timeout (fencing, see above); give the workers' value
  Millis heartbeat_timeout{5'000};
  std::vector<std::string> command;  // program and arguments of every worker
};

// Exit codes that name why an elastic launcher gave up on its workers (see Fencing above).
inline constexpr int kExitFenced = 75;  // the run declared every local worker dead; the launcher killed them
inline constexpr int kExitCutOff = 76;  // the store was unreachable for the heartbeat timeout

// Runs the workers to completion and returns the exit code for the launcher: 0 when every
// worker (any worker, when elastic) exited 0; kExitCutOff or kExitFenced (elastic, see above);
// the failed worker's exit status, or 128 + signal, otherwise; 128 + signal when the launcher
// itself was told to stop. Throws Error for bad options. Never calls exit; restores the signal
// mask it changes.
int launch(const LaunchOptions& options);

// "exit status 3" / "signal 9 (Killed)", for a waitpid status.
std::string describe_wait_status(int status);

}  // namespace hspmd::comm
