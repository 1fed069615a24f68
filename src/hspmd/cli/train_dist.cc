// `hspmd train --strategy S.json`: distributed training of a model (runtime/dist_trainer.h).
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
// This file sets a worker up; it trains through the one training loop (runtime/training_loop.h)
// with the hooks its flags ask for: scheduled switches, dispatch by length, elastic recovery.
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
#include "hspmd/cli/train_dispatch.h"
#include "hspmd/cli/train_prelaunch.h"
#include "hspmd/comm/env.h"
#include "hspmd/comm/launcher.h"
#include "hspmd/core/error.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/elastic/elastic_hook.h"
#include "hspmd/elastic/elastic_run.h"
#include "hspmd/models/model_factory.h"
#include "hspmd/planner/planner.h"
#include "hspmd/runtime/fault_injection.h"
#include "hspmd/runtime/checkpoint.h"
#include "hspmd/runtime/dist_trainer.h"
#include "hspmd/runtime/scheduled_switches.h"
#include "hspmd/runtime/training_log.h"
#include "hspmd/runtime/training_loop.h"
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

// Retrains the same steps in one process and compares each loss with the distributed run's. The
// single process starts where the run started: the same --init-weights, or the same --resume
// checkpoint (options, weights, Adam moments and data position), and trains with the same options
// (precision included) on the same data.
void check_single_process(const TrainArgs& args, const std::shared_ptr<const models::Model>& model,
                          const data::TokenDataset& dataset, const std::vector<double>& losses) {
  std::cout << "== single-process check: retraining " << losses.size() << " steps in one process" << std::endl;
  runtime::Trainer single(model, dataset, args.options);
  if (!args.resume.empty()) single.restore(args.resume);
  if (!args.init_weights.empty()) single.load_weights(runtime::load_hf_weights(args.init_weights, *model));
  const int64_t first = single.step_count();  // steps the checkpoint had taken
  double worst = 0;
  for (size_t i = 0; i < losses.size(); ++i) {
    const double expected = single.step().loss;
    worst = std::max(worst, std::abs(losses[i] - expected) / std::abs(expected));
    if (i < 3 || i + 1 == losses.size()) {
      std::printf("step %3lld  distributed %.6f  single-process %.6f\n", static_cast<long long>(first + i + 1),
                  losses[i], expected);
    }
  }
  // bf16 rounds every matmul and attention operand: a float32 reassociation (a TP all-reduce)
  // that moves a value across a bf16 rounding boundary moves its operand by a bf16 ulp, so bf16
  // runs are held to the bound the runtime's tests use for them (tests/runtime/dist_run_testlib.h).
  const double kTolerance = args.options.precision == DType::kBFloat16 ? 1e-4 : 1e-5;
  std::printf("losses match the single-process run: max relative difference %.2e over %zu steps (tolerance %.0e): %s\n",
              worst, losses.size(), kTolerance, worst <= kTolerance ? "PASS" : "FAIL");
  std::fflush(stdout);
  HSPMD_CHECK(worst <= kTolerance) << "distributed losses differ from the single-process run by " << worst;
}

// --strategy, then every --switch STEP:FILE in step order; Error naming the flag at fault.
std::vector<runtime::ScheduledPlan> scheduled_plans(const TrainArgs& args, const models::Model& model) {
  if (args.strategy.empty()) return {};  // strategies per maximum length only (cli/train_dispatch.h)
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
  std::vector<runtime::ScheduledPlan> out;
  for (const auto& [step, file] : files) {
    sharding::Strategy st = sharding::Strategy::from_file(file);
    sharding::AnnotationPlan plan = model.compile_plan(st);
    out.push_back({step, file, std::move(st), std::move(plan)});
  }
  return out;
}

// The run's processes: every rank some strategy uses.
int world_of(const std::vector<runtime::ScheduledPlan>& plans) {
  int world = 0;
  for (const runtime::ScheduledPlan& p : plans) world = std::max(world, p.strategy.ranks().back() + 1);
  return world;
}

// What an --elastic worker adds: the planner that re-plans for the survivors, the recovery, and
// its hook into the training loop.
struct ElasticParts {
  resolve::Topology topology;
  planner::Profile profile;
  planner::Planner planner;
  elastic::ElasticRun run;
  elastic::ElasticHook hook{run};  // its part of the training loop

  ElasticParts(const TrainArgs& args, const models::Model& model, std::shared_ptr<comm::Store> store, int rank,
               int world, comm::GroupCache& groups, const elastic::Admission* admission)
      : topology(resolve::Topology::from_file(args.cluster)),
        profile(planner::Profile::from_file(args.profile)),
        planner(model, topology, profile, planner_options(args)),
        run(std::move(store), rank, world, groups, planner,
            {.heartbeat_timeout = comm::Millis(static_cast<int64_t>(args.heartbeat_timeout * 1000)),
             .checkpoint_dir = args.save},
            admission) {}

  static planner::PlannerOptions planner_options(const TrainArgs& args) {
    planner::PlannerOptions o;
    o.global_batch = args.options.global_batch_tokens / args.options.seq_len;
    o.seq_len = args.options.seq_len;
    o.zero1 = false;  // survivors can only fetch what has replicas: keep optimizer states replicated
    o.schedule = specialize::parse_schedule_kind(args.schedule);
    return o;
  }

};

// How often the launcher restarted this worker (0: its first incarnation).
int restart_count() {
  const char* v = std::getenv("HSPMD_RESTART_COUNT");
  return v == nullptr ? 0 : std::atoi(v);
}

// The strategies a worker trains under: the scheduled ones (--strategy, then each --switch), or the
// one dispatch by length chooses for the first batch; the ranks they use.
struct WorkerPlans {
  std::vector<runtime::ScheduledPlan> plans;
  std::unique_ptr<LengthDispatchRun> by_length;  // null without dispatch by length
  int world = 0;
  size_t in_force = 0;  // the plan of the run's next step
};

// Error when the strategies' ranks are not the run's workers.
WorkerPlans worker_plans(const TrainArgs& args, const models::Model& model, const data::TokenDataset& dataset,
                         int world_size) {
  WorkerPlans w{scheduled_plans(args, model), make_length_dispatch(args, model)};
  if (w.by_length) {  // start under the strategy chosen for the first batch
    w.by_length->first = w.by_length->training->first_strategy(dataset, args.options, {});
    const size_t f = w.by_length->first;
    w.plans = {{1, "", w.by_length->strategies->at(f).strategy, w.by_length->strategies->plan(f)}};
  }
  w.world = w.by_length ? w.by_length->world() : world_of(w.plans);
  HSPMD_CHECK(world_size == w.world)
      << "the strategies (" << args.strategy << (w.plans.size() > 1 ? " and the --switch ones" : "") << ") use ranks 0.."
      << w.world - 1 << " but the run has " << world_size << " workers (ranks 0.." << world_size - 1 << ")";
  return w;
}

// A resumed run starts under the strategy in force at its next step.
size_t plan_in_force(const TrainArgs& args, const std::vector<runtime::ScheduledPlan>& plans) {
  const int64_t first_step =
      args.resume.empty() ? 1 : runtime::ShardedCheckpoint::open(args.resume).state().at("step").get<int64_t>() + 1;
  size_t in_force = 0;
  while (in_force + 1 < plans.size() && plans[in_force + 1].step <= first_step) ++in_force;
  return in_force;
}

// The cluster's link tiers (--cluster): switches and elastic re-plans weigh links by them
// (heuristic (ii) of the BSR); without --cluster every link counts as equal.
std::optional<resolve::Topology> cluster_of(const TrainArgs& args, int world) {
  if (args.cluster.empty()) return std::nullopt;
  resolve::Topology cluster = resolve::Topology::from_file(args.cluster);
  HSPMD_CHECK(cluster.num_devices() >= world)
      << "--cluster " << args.cluster << " has " << cluster.num_devices() << " devices, the run " << world << " ranks";
  return cluster;
}

// A restarted worker of an elastic run joins the running ones: it starts from their progress
// and strategy (holding nothing) and receives state in the switch that admits it.
std::optional<elastic::Admission> admission_of(const TrainArgs& args, comm::Store& store, int rank, int world) {
  if (!args.elastic || restart_count() == 0) return std::nullopt;
  std::cout << "rank " << rank << ": restarted; asking the running workers to admit it" << std::endl;
  return elastic::ElasticRun::join(store, rank, world, comm::Millis(600'000));
}

// The trainer's options for this worker: the run's flags, its emulated device, and the plan it
// starts under (a joining worker's is the running workers').
runtime::DistOptions worker_options(const TrainArgs& args, const WorkerPlans& w, const runtime::EmulatedDevice& device,
                                    const resolve::Topology* cluster, const elastic::Admission* admission) {
  runtime::DistOptions options{.train = args.options,
                               .schedule = specialize::parse_schedule_kind(args.schedule),
                               .device = device,
                               .trace = !args.trace.empty(),
                               .plan_name = w.plans[w.in_force].strategy.name};
  options.topology = cluster;
  if (admission) {
    options.members = admission->members;
    options.plan_name = admission->strategy.name;
  }
  if (w.by_length) w.by_length->training->install(options);
  return options;
}

// The rank-0 lines that open a run: its strategy and switches, devices and kernels.
void print_run_header(const TrainArgs& args, const WorkerPlans& w, const runtime::EmulatedDevices& devices) {
  const sharding::Strategy& strategy = w.plans[w.in_force].strategy;
  std::cout << "strategy " << strategy.name << ": " << strategy.pipelines.size() << " pipeline(s) on "
            << strategy.ranks().size() << " of " << w.world << " ranks; schedule " << args.schedule
            << (strategy.zero > 0 ? "; ZeRO-" + std::to_string(strategy.zero) : std::string()) << "\n";
  for (size_t i = w.in_force + 1; i < w.plans.size(); ++i) {
    std::cout << "switch before step " << w.plans[i].step << " to strategy " << w.plans[i].strategy.name << " ("
              << w.plans[i].file << ")\n";
  }
  if (!args.devices.empty()) std::cout << devices.describe() << "\n";
  std::cout << kernels_line(args.options.precision) << "\n";
}

// --resume or --init-weights: where the trainer starts from (it starts fresh without either).
void start_from(runtime::DistTrainer& trainer, const TrainArgs& args, bool lead) {
  if (!args.resume.empty()) {
    trainer.restore(args.resume);
    if (lead) std::cout << "resumed from " << args.resume << " at step " << trainer.step_count() << std::endl;
  }
  if (!args.init_weights.empty()) {
    trainer.load_weights(runtime::HfWeights(args.init_weights, trainer.model()));  // each rank reads its own slices
    if (lead) std::cout << "loaded weights from " << args.init_weights << std::endl;
  }
}

// A restarted worker of an elastic run, once its trainer is built: takes the run's progress and
// receives its state in the switch that admits it.
void join_run(runtime::DistTrainer& trainer, ElasticParts& parts, const elastic::Admission& admission, int rank) {
  trainer.adopt_progress(admission.step, admission.loader);
  const elastic::RecoveryReport r = parts.run.complete_join(trainer);
  std::cout << "rank " << rank << ": joined the run after step " << r.resume_step << "\n"
            << trainer.describe() << std::endl;
}

// Dispatch by length: starts deciding from the trainer's data position and hooks into the loop.
void start_dispatch(LengthDispatchRun& by_length, runtime::TrainingLoop& loop, const runtime::DistTrainer& trainer,
                    const data::TokenDataset& dataset, const TrainArgs& args, bool lead) {
  if (lead) std::cout << by_length.describe() << std::endl;
  by_length.training->start(dataset, args.options, trainer.loader_state(), by_length.first, trainer.step_count() + 1);
  loop.add_hook(by_length);
}

// --trace: this rank's Chrome trace and where its time went.
void write_trace(runtime::DistTrainer& trainer, const TrainArgs& args, int rank) {
  trainer.tracer().write(rank_path(args.trace, rank));
  // F/B spans contain their Reshards' comm spans; waiting for a peer's data counts as comm, and
  // the optimizer span holds the gradient sync (and the wait for the slowest pipeline).
  const runtime::TraceSummary s = trainer.tracer().summary();
  std::printf("trace %s: compute %.0f%%, communication and waiting %.0f%%, optimizer and gradient sync %.0f%% of %.2fs\n",
              rank_path(args.trace, rank).c_str(), 100 * (s.share("compute") - s.share("comm")),
              100 * s.share("comm"), 100 * s.share("optimizer"), s.window_seconds);
}

void run_worker(const TrainArgs& args) {
  const comm::WorkerEnv env = comm::WorkerEnv::from_environment();
  const std::shared_ptr<const models::Model> model = models::load_model(args.model);
  const data::TokenDataset dataset = data::TokenDataset::open(args.data);
  std::optional<data::TokenDataset> validation;
  if (args.eval_every > 0) validation = data::TokenDataset::open_validation(args.data);
  WorkerPlans w = worker_plans(args, *model, dataset, env.world_size);
  const int world = w.world;
  const runtime::EmulatedDevices devices =
      args.devices.empty() ? runtime::EmulatedDevices(world) : runtime::EmulatedDevices::from_file(args.devices, world);
  w.in_force = plan_in_force(args, w.plans);

  const auto timeout = std::chrono::duration_cast<comm::Millis>(std::chrono::duration<double>(args.comm_timeout));
  const std::shared_ptr<comm::Store> store = comm::open_run_store(env);
  const std::optional<elastic::Admission> admission = admission_of(args, *store, env.rank, world);
  comm::GroupCache groups(store, env.rank, comm::gloo_backend({.timeout = timeout, .host = env.host}),
                          admission ? admission->generation : 0);
  const std::optional<resolve::Topology> cluster = cluster_of(args, world);
  const runtime::DistOptions options = worker_options(args, w, devices.of(env.rank), cluster ? &*cluster : nullptr,
                                                      admission ? &*admission : nullptr);
  const sharding::Strategy& initial = admission ? admission->strategy : w.plans[w.in_force].strategy;
  runtime::DistTrainer trainer(model, dataset, admission ? model->compile_plan(initial) : w.plans[w.in_force].plan,
                               options, env.rank, world, groups);
  std::unique_ptr<ElasticParts> elastic;
  if (args.elastic) {
    elastic = std::make_unique<ElasticParts>(args, *model, store, env.rank, world, groups,
                                             admission ? &*admission : nullptr);
    elastic->run.attach(trainer, initial);
  }
  // The lowest live rank reports (rank 0 may die in an elastic run).
  auto is_lead = [&] { return env.rank == (elastic ? elastic->run.members().front() : 0); };
  const bool lead = is_lead();
  if (lead) print_run_header(args, w, devices);
  std::cout << trainer.describe() << std::endl;
  start_from(trainer, args, lead);

  runtime::TrainingLog log(std::cout, {.total_steps = args.options.steps,
                                       .metrics_path = lead ? args.metrics : "",
                                       .append = !args.resume.empty()});
  log.set_reporting(is_lead);
  if (admission) join_run(trainer, *elastic, *admission, env.rank);
  runtime::TrainingLoop loop(trainer, log, loop_options(args, validation ? &*validation : nullptr));
  if (w.by_length) start_dispatch(*w.by_length, loop, trainer, dataset, args, lead);
  runtime::ScheduledSwitches switches(std::move(w.plans), w.in_force);
  switches.set_bsr_algorithm(resolve::parse_bsr_algorithm(args.switch_bsr));
  loop.add_hook(switches);
  if (elastic) {
    switches.set_route(&elastic->hook);
    loop.add_hook(elastic->hook);
  }
  loop.run();
  if (!args.trace.empty()) write_trace(trainer, args, env.rank);
  if (is_lead() && args.check_single) check_single_process(args, model, dataset, loop.losses());
}

}  // namespace

void run_dist_train(const TrainArgs& args) {
  HSPMD_CHECK(args.dump_init_weights.empty()) << "--dump-init-weights is single-process only";
  if (std::getenv("RANK") != nullptr || args.nproc == 0) return run_worker(args);
  // Bad files and flags fail here, once, before any worker starts.
  const std::shared_ptr<const models::Model> model = models::load_model(args.model);
  const std::unique_ptr<LengthDispatchRun> by_length = make_length_dispatch(args, *model);
  const int world = by_length ? by_length->world() : world_of(scheduled_plans(args, *model));
  resolve_before_launch(args, *model, by_length.get());
  if (!args.init_weights.empty()) const runtime::HfWeights checked(args.init_weights, *model);
  if (!args.devices.empty()) const runtime::EmulatedDevices checked = runtime::EmulatedDevices::from_file(args.devices, world);
  runtime::validate_options(args.options, *model);
  const data::TokenDataset checked_data = data::TokenDataset::open(args.data);
  runtime::check_dataset_fits(checked_data, *model);
  if (args.eval_every > 0) const data::TokenDataset checked_validation = data::TokenDataset::open_validation(args.data);
  if (args.elastic) {
    HSPMD_CHECK(!by_length) << "--elastic does not combine with --dispatch or --strategy-for-max-len yet";
    HSPMD_CHECK(!args.cluster.empty() && !args.profile.empty())
        << "--elastic re-plans for the survivors with the planner: give --cluster C.json and --profile P.json";
    const resolve::Topology topology = resolve::Topology::from_file(args.cluster);
    HSPMD_CHECK(topology.num_devices() >= world) << "--cluster " << args.cluster << " has " << topology.num_devices()
                                                 << " devices, the run " << world << " ranks";
    const planner::Profile checked_profile = planner::Profile::from_file(args.profile);
    HSPMD_CHECK(args.options.global_batch_tokens % args.options.seq_len == 0)
        << "--elastic: the planner plans whole sequences; --global-batch-tokens " << args.options.global_batch_tokens
        << " must be a multiple of --seq-len " << args.options.seq_len;
  }
  runtime::check_fault_spec();
  comm::LaunchOptions launch;
  launch.nproc = args.nproc;
  launch.elastic = args.elastic;
  HSPMD_CHECK(args.max_restarts == 0 || args.elastic) << "--max-restarts needs --elastic";
  launch.max_restarts = args.max_restarts;
  launch.heartbeat_timeout = comm::Millis(static_cast<int64_t>(args.heartbeat_timeout * 1000));  // fencing
  launch.command = own_command_line();
  const int code = comm::launch(launch);
  HSPMD_CHECK(code == 0) << "distributed training failed (launcher exit code " << code << ")";
}

}  // namespace hspmd::cli
