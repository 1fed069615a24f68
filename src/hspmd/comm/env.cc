#include "hspmd/comm/env.h"

#include <cstdlib>

#include "hspmd/comm/prefix_store.h"
#include "hspmd/core/error.h"

namespace hspmd::comm {

namespace {

int parse_int(const char* name, const char* text) {
  std::string s = text;
  HSPMD_CHECK(!s.empty() && s.find_first_not_of("0123456789") == std::string::npos)
      << "environment variable " << name << "='" << s << "' is not a non-negative integer";
  return std::stoi(s);
}

}  // namespace

WorkerEnv WorkerEnv::from_environment(const Getenv& getenv_fn) {
  Getenv get = getenv_fn ? getenv_fn : Getenv([](const char* name) { return std::getenv(name); });
  auto required = [&](const char* name) {
    const char* v = get(name);
    HSPMD_CHECK(v != nullptr) << "environment variable " << name << " is not set";
    return v;
  };
  WorkerEnv env;
  // Variable names per launcher: rank, world size, local rank.
  struct Source {
    const char* name;
    const char* rank;
    const char* size;
    const char* local;
  };
  const Source sources[] = {{"hspmd launch", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
                            {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
                            {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}};
  const Source* found = nullptr;
  for (const auto& s : sources) {
    if (get(s.rank) != nullptr) {
      found = &s;
      break;
    }
  }
  HSPMD_CHECK(found != nullptr) << "no rank in the environment: start workers with `hspmd launch`, mpirun or srun "
                                   "(RANK, OMPI_COMM_WORLD_RANK and SLURM_PROCID are all unset)";
  env.source = found->name;
  env.rank = parse_int(found->rank, get(found->rank));
  env.world_size = parse_int(found->size, required(found->size));
  env.local_rank = get(found->local) ? parse_int(found->local, get(found->local)) : 0;
  HSPMD_CHECK(env.world_size > 0 && env.rank < env.world_size)
      << found->rank << "=" << env.rank << " is not below " << found->size << "=" << env.world_size;

  if (const char* id = get("HSPMD_RUN_ID")) {
    env.run_id = id;
  } else if (const char* job = get("SLURM_JOB_ID")) {
    env.run_id = std::string("slurm-") + job + (get("SLURM_STEP_ID") ? std::string(".") + get("SLURM_STEP_ID") : "");
  } else if (const char* ns = get("PMIX_NAMESPACE")) {
    env.run_id = ns;  // Open MPI 5: one namespace per mpirun job
  } else if (const char* job_id = get("OMPI_MCA_ess_base_jobid")) {
    env.run_id = std::string("ompi-") + job_id;
  }
  HSPMD_CHECK(!env.run_id.empty()) << "environment variable HSPMD_RUN_ID is not set (and no SLURM or Open MPI job "
                                      "id to derive it from)";
  HSPMD_CHECK(env.run_id.find('/') == std::string::npos) << "run id '" << env.run_id << "' contains '/'";
  env.store_url = get("HSPMD_STORE") ? get("HSPMD_STORE") : "file:///tmp/hspmd-" + env.run_id;
  if (const char* host = get("HSPMD_HOST")) env.host = host;
  return env;
}

std::shared_ptr<Store> open_run_store(const WorkerEnv& env) {
  return std::make_shared<PrefixStore>(open_store(env.store_url), "run/" + env.run_id + "/");
}

}  // namespace hspmd::comm
