// WorkerEnv: who this worker process is, read from the environment its launcher set.
//
//   hspmd launch   RANK, WORLD_SIZE, LOCAL_RANK, HSPMD_STORE, HSPMD_RUN_ID (HSPMD_HOST optional)
//   mpirun         OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   srun           SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (run id from SLURM_JOB_ID.SLURM_STEP_ID)
//
//   WorkerEnv env = WorkerEnv::from_environment();
//   auto store = open_run_store(env);    // keys live under "run/<run id>/"
//   GroupCache groups(store, env.rank, gloo_backend({.host = env.host}));
//
// HSPMD_STORE defaults to a file store in /tmp/hspmd-<run id> (one host only).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "hspmd/comm/store.h"

namespace hspmd::comm {

struct WorkerEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string store_url;          // HSPMD_STORE
  std::string run_id;             // HSPMD_RUN_ID
  std::string host = "127.0.0.1";  // HSPMD_HOST: this host's address as peers see it
  std::string source;             // "hspmd launch", "mpirun" or "srun"

  // Reads the variables through getenv (a parameter so tests need not touch the process
  // environment). Throws Error naming the variable that is missing or malformed.
  using Getenv = std::function<const char*(const char*)>;
  static WorkerEnv from_environment(const Getenv& getenv = nullptr);
};

// The run's store: open_store(env.store_url) namespaced by "run/<run id>/".
std::shared_ptr<Store> open_run_store(const WorkerEnv& env);

}  // namespace hspmd::comm
