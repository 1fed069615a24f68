// `hspmd train --strategy S.json`: distributed training of the built-in Llama (runtime/dist_trainer.h).
//
//   hspmd train --model configs/llama-tiny.json --data runs/kjv --nproc 4
//       --strategy examples/strategies/local-hetero-4.json
//       --devices examples/devices/local-hetero-4.json --check-single                 (one line)
//   hspmd launch -n 4 -- hspmd train --model ... --strategy ...     (the same, launched explicitly)
//
// With --nproc N and no RANK in the environment, this process becomes the launcher of N workers
// running the same command line (comm/launcher.h); each worker trains its part of the strategy.
// Rank 0 prints the steps, writes metrics and, with --check-single, retrains the same steps in one
// process and compares every loss (the oracle of architecture §9). Checkpoints (--save, --resume) are
// strategy-independent: a run saved under one strategy resumes under another, or single-process.
// `--switch 20:B.json` moves the run to strategy B before step 20 with one fused BSR of weights and
// Adam moments (runtime/dist_trainer.h, switch_to), without a restart; the workers are the ranks
// any of the strategies uses, and a rank the strategy in force does not use waits as a spare.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "hspmd/cli/train_args.h"
#include "hspmd/comm/env.h"
#include "hspmd/comm/launcher.h"
#include "hspmd/core/error.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/models/llama_plan.h"
#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/specialize/pipeline_layout.h"

namespace hspmd::cli {
namespace {

// This process's own command line, to start the workers with.
std::vector<std::string> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  HSPMD_CHECK(in.good()) << "cannot read /proc/self/cmdline to start the workers; use `hspmd launch -n N -- ...`";
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(in, arg, '\0')) args.push_back(arg);
  HSPMD_CHECK(!args.empty()) << "empty /proc/self/cmdline";
  args[0] = "/proc/self/exe";
  return args;
}

// "trace.json" -> "trace.rank2.json"
std::string rank_path(const std::string& path, int rank) {
  const std::string suffix = ".json";
  const std::string tag = ".rank" + std::to_string(rank);
  if (path.size() > suffix.size() && path.ends_with(suffix))
    return path.substr(0, path.size() - suffix.size()) + tag + suffix;
  return path + tag + suffix;
}

// Retrains the same steps in one process and compares each loss with the distributed run's.
void check_single_process(const models::LlamaConfig& config, const data::TokenDataset& dataset,
                          const runtime::TrainerOptions& options, const std::vector<double>& losses) {
  std::cout << "== single-process check: retraining " << losses.size() << " steps in one process" << std::endl;
  runtime::Trainer single(config, dataset, options);
  double worst = 0;
  for (size_t i = 0; i < losses.size(); ++i) {
    const double expected = single.step().loss;
    worst = std::max(worst, std::abs(losses[i] - expected) / std::abs(expected));
    if (i < 3 || i + 1 == losses.size()) {
      std::printf("step %3zu  distributed %.6f  single-process %.6f\n", i + 1, losses[i], expected);
    }
  }
  constexpr double kTolerance = 1e-5;
  std::printf("losses match the single-process run: max relative difference %.2e over %zu steps (tolerance %.0e): %s\n",
              worst, losses.size(), kTolerance, worst <= kTolerance ? "PASS" : "FAIL");
  std::fflush(stdout);
  HSPMD_CHECK(worst <= kTolerance) << "distributed losses differ from the single-process run by " << worst;
}

// A strategy file compiled for the model, with the step before which the run switches to it.
struct ScheduledPlan {
  int64_t step = 1;  // 1 for the starting strategy
  std::string file;
  sharding::Strategy strategy;
  sharding::AnnotationPlan plan;
};

// --strategy, then every --switch STEP:FILE in step order; Error naming the flag at fault.
std::vector<ScheduledPlan> scheduled_plans(const TrainArgs& args, const models::LlamaConfig& config) {
  std::vector<std::pair<int64_t, std::string>> files{{1, args.strategy}};
  for (const std::string& spec : args.switches) {
    const size_t colon = std::min(spec.find(':'), spec.size());
    int64_t step = 0;
    const auto [end, error] = std::from_chars(spec.data(), spec.data() + colon, step);
    HSPMD_CHECK(error == std::errc() && end == spec.data() + colon && step >= 2 && colon + 1 < spec.size())
        << "--switch " << spec << ": expected STEP:STRATEGY.json with STEP >= 2 (the step that runs first under "
        << "the new strategy)";
    HSPMD_CHECK(step > files.back().first)
        << "--switch " << spec << ": switches must be given in increasing step order, one per step";
    HSPMD_CHECK(step <= args.options.steps) << "--switch " << spec << ": the run has only " << args.options.steps
                                            << " steps";
    files.emplace_back(step, spec.substr(colon + 1));
  }
  std::vector<ScheduledPlan> out;
  for (const auto& [step, file] : files) {
    sharding::Strategy st = sharding::Strategy::from_file(file);
    sharding::AnnotationPlan plan = models::compile_llama_plan(config, st);
    out.push_back({step, file, std::move(st), std::move(plan)});
  }
  return out;
}

// The run's processes: every rank some strategy uses.
int world_of(const std::vector<ScheduledPlan>& plans) {
  int world = 0;
  for (const ScheduledPlan& p : plans) world = std::max(world, p.strategy.ranks().back() + 1);
  return world;
}

void run_worker(const TrainArgs& args) {
  const comm::WorkerEnv env = comm::WorkerEnv::from_environment();
  const models::LlamaConfig config = models::LlamaConfig::from_file(args.model);
  const data::TokenDataset dataset = data::TokenDataset::open(args.data);
  std::optional<data::TokenDataset> validation;
  if (args.eval_every > 0) validation = data::TokenDataset::open_validation(args.data);
  const std::vector<ScheduledPlan> plans = scheduled_plans(args, config);
  const int world = world_of(plans);
  HSPMD_CHECK(env.world_size == world)
      << "the strategies (" << args.strategy << (plans.size() > 1 ? " and the --switch ones" : "") << ") use ranks 0.."
      << world - 1 << " but the run has " << env.world_size << " workers (ranks 0.." << env.world_size - 1 << ")";
  const runtime::EmulatedDevices devices =
      args.devices.empty() ? runtime::EmulatedDevices(world) : runtime::EmulatedDevices::from_file(args.devices, world);

  // A resumed run starts under the strategy in force at its next step.
  int64_t first_step = 1;
  if (!args.resume.empty()) first_step = runtime::ShardedCheckpoint::open(args.resume).state().at("step").get<int64_t>() + 1;
  size_t in_force = 0;
  while (in_force + 1 < plans.size() && plans[in_force + 1].step <= first_step) ++in_force;

  const auto timeout = std::chrono::duration_cast<comm::Millis>(std::chrono::duration<double>(args.comm_timeout));
  comm::GroupCache groups(comm::open_run_store(env), env.rank,
                          comm::gloo_backend({.timeout = timeout, .host = env.host}));
  runtime::DistOptions options{.train = args.options,
                               .schedule = specialize::parse_schedule_kind(args.schedule),
                               .device = devices.of(env.rank),
                               .trace = !args.trace.empty(),
                               .plan_name = plans[in_force].strategy.name};
  runtime::DistTrainer trainer(config, dataset, plans[in_force].plan, options, env.rank, world, groups);
  const bool lead = env.rank == 0;
  if (lead) {
    const sharding::Strategy& strategy = plans[in_force].strategy;
    std::cout << "strategy " << strategy.name << ": " << strategy.pipelines.size() << " pipeline(s) on "
              << strategy.ranks().size() << " of " << world << " ranks; schedule " << args.schedule
              << (strategy.zero1 ? "; ZeRO-1" : "") << "\n";
    for (size_t i = in_force + 1; i < plans.size(); ++i) {
      std::cout << "switch before step " << plans[i].step << " to strategy " << plans[i].strategy.name << " ("
                << plans[i].file << ")\n";
    }
    if (!args.devices.empty()) std::cout << devices.describe() << "\n";
    std::cout << kernels_line(args.options.precision) << "\n";
  }
  std::cout << trainer.describe() << std::endl;
  if (!args.resume.empty()) {
    trainer.restore(args.resume);
    if (lead) std::cout << "resumed from " << args.resume << " at step " << trainer.step_count() << std::endl;
  }
  if (!args.init_weights.empty()) {
    trainer.load_weights(runtime::HfWeights(args.init_weights, config));  // each rank reads its own slices
    if (lead) std::cout << "loaded weights from " << args.init_weights << std::endl;
  }

  std::ofstream metrics;
  if (lead && !args.metrics.empty()) {
    metrics.open(args.metrics, args.resume.empty() ? std::ios::trunc : std::ios::app);
    HSPMD_CHECK(metrics.good()) << "cannot open metrics file " << args.metrics;
  }
  std::vector<double> losses;
  size_t next_switch = in_force + 1;
  while (!trainer.done()) {
    if (next_switch < plans.size() && plans[next_switch].step == trainer.step_count() + 1) {
      const ScheduledPlan& p = plans[next_switch++];
      try {
        const runtime::SwitchReport r = trainer.switch_to(p.plan, p.strategy.name);
        if (lead) std::cout << r.to_string() << std::endl;
        if (metrics.is_open()) metrics << r.to_json().dump() << std::endl;
        std::cout << trainer.describe() << std::endl;
      } catch (const runtime::SwitchRefused& e) {
        if (lead) std::cout << e.what() << "; training goes on under plan " << trainer.plan_name() << std::endl;
      }
    }
    const runtime::StepMetrics m = trainer.step();
    losses.push_back(m.loss);
    HSPMD_CHECK(std::isfinite(m.loss)) << "training diverged at step " << m.step << ": loss " << m.loss;
    if (lead) std::cout << step_line(m, args.options.steps) << std::endl;
    if (metrics.is_open()) metrics << m.to_json().dump() << std::endl;
    if (evaluates_after(args, m.step, trainer.done())) {
      const double val = trainer.evaluate(*validation, args.eval_tokens);
      if (lead) std::cout << eval_line(m.step, val) << std::endl;
      if (metrics.is_open()) metrics << eval_record(m.step, val) << std::endl;
    }
    if (!args.save.empty() && (trainer.done() || (args.save_every > 0 && m.step % args.save_every == 0))) {
      trainer.save(args.save);
      if (lead) std::cout << "saved checkpoint " << args.save << " at step " << m.step << std::endl;
    }
  }
  if (!args.trace.empty()) {
    trainer.tracer().write(rank_path(args.trace, env.rank));
    // F/B spans contain their Reshards' comm spans; waiting for a peer's data counts as comm, and
    // the optimizer span holds the gradient sync (and the wait for the slowest pipeline).
    const runtime::TraceSummary s = trainer.tracer().summary();
    std::printf("trace %s: compute %.0f%%, communication and waiting %.0f%%, optimizer and gradient sync %.0f%% of %.2fs\n",
                rank_path(args.trace, env.rank).c_str(), 100 * (s.share("compute") - s.share("comm")),
                100 * s.share("comm"), 100 * s.share("optimizer"), s.window_seconds);
  }
  if (lead && args.check_single) {
    HSPMD_CHECK(args.resume.empty()) << "--check-single compares a run from step 0; it cannot follow --resume";
    check_single_process(config, dataset, args.options, losses);
  }
}

}  // namespace

void run_dist_train(const TrainArgs& args) {
  HSPMD_CHECK(args.dump_init_weights.empty()) << "--dump-init-weights is single-process only";
  if (std::getenv("RANK") != nullptr || args.nproc == 0) return run_worker(args);
  // Bad files and flags fail here, once, before any worker starts.
  const models::LlamaConfig config = models::LlamaConfig::from_file(args.model);
  const int world = world_of(scheduled_plans(args, config));
  if (!args.init_weights.empty()) const runtime::HfWeights checked(args.init_weights, config);
  if (!args.devices.empty()) const runtime::EmulatedDevices checked = runtime::EmulatedDevices::from_file(args.devices, world);
  const data::TokenDataset checked_data = data::TokenDataset::open(args.data);
  if (args.eval_every > 0) const data::TokenDataset checked_validation = data::TokenDataset::open_validation(args.data);
  comm::LaunchOptions launch;
  launch.nproc = args.nproc;
  launch.command = own_command_line();
  const int code = comm::launch(launch);
  HSPMD_CHECK(code == 0) << "distributed training failed (launcher exit code " << code << ")";
}

}  // namespace hspmd::cli
