#include "hspmd/comm/slurm_job.h"

#include <cstdlib>

#include "hspmd/core/error.h"

namespace hspmd::comm {

std::string first_host_of(const std::string& nodelist) {
  std::string host;
  size_t i = 0;
  while (i < nodelist.size() && nodelist[i] != ',') {
    if (nodelist[i] != '[') {
      host += nodelist[i++];
      continue;
    }
    // A range set "[01-04,07]": its first number, zero padding kept.
    const size_t close = nodelist.find(']', i);
    HSPMD_CHECK(close != std::string::npos) << "Slurm host list '" << nodelist << "' has an unclosed '['";
    const std::string first = nodelist.substr(i + 1, nodelist.find_first_of("-,]", i + 1) - i - 1);
    HSPMD_CHECK(!first.empty() && first.find_first_not_of("0123456789") == std::string::npos)
        << "Slurm host list '" << nodelist << "': range '" << nodelist.substr(i, close - i + 1)
        << "' does not start with a number";
    host += first;
    i = close + 1;
  }
  HSPMD_CHECK(!host.empty()) << "Slurm host list '" << nodelist << "' names no host";
  return host;
}

std::optional<SlurmJob> SlurmJob::from_environment(const Getenv& getenv_fn) {
  Getenv get = getenv_fn ? getenv_fn : Getenv([](const char* name) { return std::getenv(name); });
  if (get("SLURM_STEP_NUM_NODES") == nullptr) return std::nullopt;
  auto number = [&](const char* name) {
    const char* v = get(name);
    HSPMD_CHECK(v != nullptr) << "environment variable " << name << " is not set (hspmd launch under srun)";
    const std::string s = v;
    HSPMD_CHECK(!s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos)
        << "environment variable " << name << "='" << s << "' is not a non-negative integer";
    return std::stoi(s);
  };
  SlurmJob job;
  job.nnodes = number("SLURM_STEP_NUM_NODES");
  job.node_rank = number("SLURM_NODEID");
  HSPMD_CHECK(job.nnodes >= 1 && job.node_rank < job.nnodes)
      << "SLURM_NODEID=" << job.node_rank << " is not below SLURM_STEP_NUM_NODES=" << job.nnodes;
  if (get("SLURM_STEP_NUM_TASKS") != nullptr) {
    HSPMD_CHECK(number("SLURM_STEP_NUM_TASKS") == job.nnodes)
        << "srun started " << number("SLURM_STEP_NUM_TASKS") << " tasks on " << job.nnodes
        << " nodes; hspmd launch wants one per node (srun --ntasks-per-node 1); it starts the workers itself";
  }
  const char* nodelist = get("SLURM_STEP_NODELIST") ? get("SLURM_STEP_NODELIST") : get("SLURM_JOB_NODELIST");
  HSPMD_CHECK(nodelist != nullptr) << "environment variable SLURM_STEP_NODELIST is not set (hspmd launch under srun)";
  job.first_host = first_host_of(nodelist);
  const char* job_id = get("SLURM_JOB_ID");
  HSPMD_CHECK(job_id != nullptr) << "environment variable SLURM_JOB_ID is not set (hspmd launch under srun)";
  job.run_id = std::string("slurm-") + job_id + (get("SLURM_STEP_ID") ? std::string(".") + get("SLURM_STEP_ID") : "");
  HSPMD_CHECK(job.run_id.find('/') == std::string::npos) << "SLURM_JOB_ID '" << job_id << "' contains '/'";
  return job;
}

}  // namespace hspmd::comm
