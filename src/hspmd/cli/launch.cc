// `hspmd launch`: starts and supervises the local workers of a run (comm/launcher.h).
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <string>

#include "hspmd/cli/commands.h"
#include "hspmd/comm/slurm_job.h"
#include "hspmd/comm/launcher.h"
#include "hspmd/comm/store.h"

namespace hspmd::cli {

void add_launch_command(CLI::App& app) {
  auto options = std::make_shared<comm::LaunchOptions>();
  auto grace_s = std::make_shared<double>(5.0);
  auto comm_timeout_s = std::make_shared<double>(0.0);
  auto heartbeat_timeout_s = std::make_shared<double>(5.0);
  auto password_file = std::make_shared<std::string>();
  auto insecure_store = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand("launch", "Start N local workers: hspmd launch -n N [options] -- CMD ARGS...");
  sub->add_option("-n,--nproc", options->nproc, "workers on this host")->required()->check(CLI::PositiveNumber);
  CLI::Option* nnodes = sub->add_option("--nnodes", options->nnodes, "hosts in the run (under srun: SLURM_NNODES)")
                            ->check(CLI::PositiveNumber);
  CLI::Option* node_rank =
      sub->add_option("--node-rank", options->node_rank,
                      "index of this host (its ranks start at node-rank * n; under srun: SLURM_NODEID)")
          ->check(CLI::NonNegativeNumber);
  CLI::Option* store = sub->add_option(
      "--store", options->store_url,
      "rendezvous store: file:///dir or redis://[user@]host:port (default: a file store in /tmp; under srun on "
      "several nodes: redis://<first node of the job>:6379)");
  CLI::Option* run_id = sub->add_option(
      "--run-id", options->run_id, "run id shared by every node (default: random; under srun: slurm-<job>.<step>)");
  sub->add_option("--store-password-file", *password_file,
                  "file whose first line is the Redis store's password (mode 600; it reaches the workers as "
                  "HSPMD_STORE_PASSWORD, never on a command line)");
  sub->add_flag("--insecure-store", *insecure_store,
                "allow a Redis store on another host without a password (anyone who reaches it can write the run)");
  sub->add_option("--host", options->host, "address of this host as peers see it (sets HSPMD_HOST)");
  sub->add_flag("--elastic", options->elastic, "keep survivors running when a worker dies");
  sub->add_option("--max-restarts", options->max_restarts,
                  "--elastic: start a dead worker again, at most this many times per rank (it joins the others)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--heartbeat-timeout", *heartbeat_timeout_s,
                  "--elastic: the workers' --heartbeat-timeout in seconds; a local worker silent this long is "
                  "killed (fenced), and a store unreachable this long stops every local worker (exit code 76)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--grace", *grace_s, "seconds between SIGTERM and SIGKILL when stopping workers")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--comm-timeout", *comm_timeout_s,
                  "seconds a worker's communication may take before it fails (sets HSPMD_COMM_TIMEOUT, which "
                  "`hspmd train` reads when not given --comm-timeout)")
      ->check(CLI::PositiveNumber);
  sub->add_option("command", options->command, "worker program and its arguments (after --)")->required();
  sub->callback([=] {
    if (options->max_restarts > 0 && !options->elastic) throw CLI::ValidationError("--max-restarts", "needs --elastic");
    options->grace = comm::Millis(static_cast<int64_t>(*grace_s * 1000));
    options->heartbeat_timeout = comm::Millis(static_cast<int64_t>(*heartbeat_timeout_s * 1000));
    // Under srun (one launcher per node), Slurm says what a per-host command would have to.
    if (const auto slurm = comm::SlurmJob::from_environment()) {
      if (nnodes->count() == 0) options->nnodes = slurm->nnodes;
      if (node_rank->count() == 0) options->node_rank = slurm->node_rank;
      if (run_id->count() == 0) options->run_id = slurm->run_id;
      if (store->count() == 0 && options->nnodes > 1) options->store_url = "redis://" + slurm->first_host + ":6379";
    }
    // Workers inherit the launcher's environment: the secret travels there, not in argv.
    if (!password_file->empty()) {
      ::setenv("HSPMD_STORE_PASSWORD", comm::read_password_file(*password_file).c_str(), 1);
    }
    if (*insecure_store) ::setenv("HSPMD_INSECURE_STORE", "1", 1);
    if (*comm_timeout_s > 0) ::setenv("HSPMD_COMM_TIMEOUT", std::to_string(*comm_timeout_s).c_str(), 1);
    int code = comm::launch(*options);
    // RuntimeError carries the exit code to main without printing anything more.
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace hspmd::cli
