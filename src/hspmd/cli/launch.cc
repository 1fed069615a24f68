// `hspmd launch`: starts and supervises the local workers of a run (comm/launcher.h).
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <string>

#include "hspmd/cli/commands.h"
#include "hspmd/comm/launcher.h"

namespace hspmd::cli {

void add_launch_command(CLI::App& app) {
  auto options = std::make_shared<comm::LaunchOptions>();
  auto grace_s = std::make_shared<double>(5.0);
  auto comm_timeout_s = std::make_shared<double>(0.0);
  CLI::App* sub = app.add_subcommand("launch", "Start N local workers: hspmd launch -n N [options] -- CMD ARGS...");
  sub->add_option("-n,--nproc", options->nproc, "workers on this host")->required()->check(CLI::PositiveNumber);
  sub->add_option("--nnodes", options->nnodes, "hosts in the run")->check(CLI::PositiveNumber);
  sub->add_option("--node-rank", options->node_rank, "index of this host (its ranks start at node-rank * n)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--store", options->store_url,
                  "rendezvous store: file:///dir or redis://host:port (default: file store in /tmp)");
  sub->add_option("--run-id", options->run_id, "run id shared by every node (default: random)");
  sub->add_option("--host", options->host, "address of this host as peers see it (sets HSPMD_HOST)");
  sub->add_flag("--elastic", options->elastic, "keep survivors running when a worker dies");
  sub->add_option("--max-restarts", options->max_restarts,
                  "--elastic: start a dead worker again, at most this many times per rank (it joins the others)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--grace", *grace_s, "seconds between SIGTERM and SIGKILL when stopping workers")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--comm-timeout", *comm_timeout_s,
                  "seconds a worker's communication may take before it fails (sets HSPMD_COMM_TIMEOUT, which "
                  "`hspmd train` reads when not given --comm-timeout)")
      ->check(CLI::PositiveNumber);
  sub->add_option("command", options->command, "worker program and its arguments (after --)")->required();
  sub->callback([options, grace_s, comm_timeout_s] {
    if (options->max_restarts > 0 && !options->elastic) throw CLI::ValidationError("--max-restarts", "needs --elastic");
    options->grace = comm::Millis(static_cast<int64_t>(*grace_s * 1000));
    // Workers inherit the launcher's environment.
    if (*comm_timeout_s > 0) ::setenv("HSPMD_COMM_TIMEOUT", std::to_string(*comm_timeout_s).c_str(), 1);
    int code = comm::launch(*options);
    // RuntimeError carries the exit code to main without printing anything more.
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace hspmd::cli
