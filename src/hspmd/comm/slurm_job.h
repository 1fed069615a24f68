// SlurmJob: what `hspmd launch` takes from Slurm when srun starts it, one launcher per node, so a
// cluster user writes one command for every host:
//
//   srun --nodes 2 --ntasks-per-node 1 hspmd launch -n 4 --elastic -- hspmd train ...
//     node count  SLURM_STEP_NUM_NODES   (2)
//     node rank   SLURM_NODEID           (0 or 1)
//     first host  SLURM_STEP_NODELIST    ("gpu[07-08]" -> "gpu07", where the store runs)
//     run id      SLURM_JOB_ID, SLURM_STEP_ID ("slurm-4711.0")
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace hspmd::comm {

struct SlurmJob {
  int nnodes = 1;
  int node_rank = 0;
  std::string first_host;
  std::string run_id;

  // nullopt outside an srun step (SLURM_STEP_NUM_NODES unset). Error naming the variable when one
  // is malformed, or when srun started more than one launcher per node.
  using Getenv = std::function<const char*(const char*)>;
  static std::optional<SlurmJob> from_environment(const Getenv& getenv = nullptr);
};

// The first host of a Slurm host list: "node[01-04,07],gpu3" -> "node01", "a,b" -> "a",
// "rack[2-3]-n[5-6]" -> "rack2-n5". Error naming the list when it is malformed.
std::string first_host_of(const std::string& nodelist);

}  // namespace hspmd::comm
