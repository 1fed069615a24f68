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
#include "hspmd/cli/train_worker.h"
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
#include "hspmd/runtime/comm_choice.h"
#include "hspmd/runtime/rank_compute.h"
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
  // With bf16-only switches, a step under another strategy than the first also computes with the
  // embedding and norm weights rounded to bf16 (a relative change of up to 2^-9 each), and later
  // steps with weights updated from those gradients: runtime_bf16_switch_dist_test measured up to
  // 2.5e-4 against full switches, and holds them to 2e-3.
  const double kTolerance = args.switch_states == "bf16-params"           ? 2e-3
                            : args.options.precision == DType::kBFloat16 ? 1e-4
                                                                         : 1e-5;
  std::printf("losses match the single-process run: max relative difference %.2e over %zu steps (tolerance %.0e): %s\n",
              worst, losses.size(), kTolerance, worst <= kTolerance ? "PASS" : "FAIL");
  std::fflush(stdout);
  HSPMD_CHECK(worst <= kTolerance) << "distributed losses differ from the single-process run by " << worst;
}

// --strategy, then every --switch STEP:FILE in step order; Error naming the flag at fault.
std::vector<runtime::ScheduledPlan> scheduled_plans(const TrainArgs& args, const models::Model& model) {
  if (args.strategy.empty() && !args.strategy_value) return {};  // strategies per maximum length only
                                                                // (cli/train_dispatch.h)
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
    sharding::Strategy st = step == 1 && args.strategy_value ? *args.strategy_value : sharding::Strategy::from_file(file);
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
    o.grad_bucket_mb = args.grad_bucket_mb;  // the re-plan prices the run's own overlap
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
  // --base-strategy: the plan the master state lives under with bf16-only switches; unset: the one
  // in force at the start.
  std::optional<runtime::ScheduledPlan> base{};

  // The plan the trainer is built under: it lays out the master state.
  const runtime::ScheduledPlan& state_plan() const { return base ? *base : plans[in_force]; }
};

// Whether the run switches only the bf16 compute copy (--switch-states bf16-params); Error naming
// the flag it does not combine with.
bool bf16_switches(const TrainArgs& args) {
  HSPMD_CHECK(args.base_strategy.empty() || args.switch_states == "bf16-params")
      << "--base-strategy " << args.base_strategy << " names where bf16-only switches keep the master weights and "
      << "Adam moments: it needs --switch-states bf16-params";
  if (args.switch_states != "bf16-params") return false;
  HSPMD_CHECK(args.options.precision == DType::kBFloat16)
      << "--switch-states bf16-params moves the parameters as bf16 values: it needs --precision bf16";
  HSPMD_CHECK(args.switch_bsr == "fused") << "--switch-states bf16-params runs the fused BSR, not --switch-bsr "
                                          << args.switch_bsr;
  return true;
}

// --base-strategy: which of `run` (the strategies the run computes under) holds the master state
// under bf16-only switches; nullopt without the flag (the strategy the run starts under). Error
// naming the file when it holds none of them.
std::optional<size_t> base_strategy_index(const TrainArgs& args, const std::vector<const sharding::Strategy*>& run) {
  if (args.base_strategy.empty()) return std::nullopt;
  const sharding::Strategy base = sharding::Strategy::from_file(args.base_strategy);
  std::string names;
  for (size_t i = 0; i < run.size(); ++i) {
    if (*run[i] == base) return i;
    names += (i == 0 ? "" : ", ") + run[i]->name;
  }
  HSPMD_THROW() << "--base-strategy " << args.base_strategy << " (strategy " << base.name
                << ") is none of the run's strategies (" << names
                << "): the master state lives under one the run computes under";
}

// The strategies of dispatch by length, in its order.
std::vector<const sharding::Strategy*> strategies_of(const planner::LengthStrategies& set) {
  std::vector<const sharding::Strategy*> out;
  for (size_t i = 0; i < set.size(); ++i) out.push_back(&set.at(i).strategy);
  return out;
}

std::vector<const sharding::Strategy*> strategies_of(const std::vector<runtime::ScheduledPlan>& plans) {
  std::vector<const sharding::Strategy*> out;
  for (const runtime::ScheduledPlan& p : plans) out.push_back(&p.strategy);
  return out;
}

// Error when the strategies' ranks are not the run's workers.
WorkerPlans worker_plans(const TrainArgs& args, const models::Model& model, const data::TokenDataset& dataset,
                         int world_size) {
  WorkerPlans w{scheduled_plans(args, model), make_length_dispatch(args, model)};
  if (w.by_length) {  // start under the strategy chosen for the first batch
    const planner::LengthStrategies& set = *w.by_length->strategies;
    w.by_length->first = w.by_length->training->first_strategy(dataset, args.options, {});
    const size_t f = w.by_length->first;
    w.plans = {{1, "", set.at(f).strategy, set.plan(f)}};
    if (bf16_switches(args)) {  // the base holds the state
      const size_t base = base_strategy_index(args, strategies_of(set)).value_or(f);
      w.by_length->strategies->price_bf16_switches(base);
      if (base != f) w.base = runtime::ScheduledPlan{1, args.base_strategy, set.at(base).strategy, set.plan(base)};
    }
  } else if (bf16_switches(args)) {
    if (const std::optional<size_t> base = base_strategy_index(args, strategies_of(w.plans))) w.base = w.plans[*base];
  }
  w.world = w.by_length ? w.by_length->world() : world_of(w.plans);
  HSPMD_CHECK(world_size == w.world)
      << "the strategies (" << (args.strategy_value ? "strategy " + args.strategy_value->name : args.strategy)
      << (w.plans.size() > 1 ? " and the --switch ones" : "") << ") use ranks 0.."
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
                               .plan_name = w.state_plan().strategy.name};
  options.topology = cluster;
  options.grad_bucket_mb = args.grad_bucket_mb;
  options.bf16_switches = bf16_switches(args);
  if (admission) {
    options.members = admission->members;
    options.plan_name = admission->strategy.name;
  }
  if (w.by_length) w.by_length->training->install(options);
  return options;
}

// The rank-0 lines that open a run: its strategy and switches, devices and kernels.
void print_run_header(const TrainArgs& args, const WorkerPlans& w, const runtime::EmulatedDevices& devices,
                      std::ostream& out) {
  const sharding::Strategy& strategy = w.plans[w.in_force].strategy;
  out << "strategy " << strategy.name << ": " << strategy.pipelines.size() << " pipeline(s) on "
            << strategy.ranks().size() << " of " << w.world << " ranks; schedule " << args.schedule
            << (strategy.zero > 0 ? "; ZeRO-" + std::to_string(strategy.zero) : std::string()) << "\n";
  for (size_t i = w.in_force + 1; i < w.plans.size(); ++i) {
    out << "switch before step " << w.plans[i].step << " to strategy " << w.plans[i].strategy.name << " ("
              << w.plans[i].file << ")\n";
  }
  if (!args.devices.empty()) out << devices.describe() << "\n";
  out << kernels_line(args.options.precision) << "\n";
}

// --resume or --init-weights: where the trainer starts from (it starts fresh without either).
void start_from(runtime::DistTrainer& trainer, const TrainArgs& args, bool lead, std::ostream& out) {
  if (!args.resume.empty()) {
    trainer.restore(args.resume);
    if (lead) out << "resumed from " << args.resume << " at step " << trainer.step_count() << std::endl;
  }
  if (!args.init_weights.empty()) {
    trainer.load_weights(runtime::HfWeights(args.init_weights, trainer.model()));  // each rank reads its own slices
    if (lead) out << "loaded weights from " << args.init_weights << std::endl;
  }
}

// --base-strategy other than the strategy the run starts under: the trainer holds the state under
// the base, and the first steps compute under the plan in force through a bf16-only switch.
void compute_under_first_plan(runtime::DistTrainer& trainer, const WorkerPlans& w, bool lead, std::ostream& out) {
  const runtime::ScheduledPlan& first = w.plans[w.in_force];
  if (first.strategy == w.base->strategy) return;
  const runtime::SwitchReport r = trainer.switch_to(first.plan, first.strategy.name);
  if (lead) out << r.to_string() << std::endl;
}

// A restarted worker of an elastic run, once its trainer is built: takes the run's progress and
// receives its state in the switch that admits it.
void join_run(runtime::DistTrainer& trainer, ElasticParts& parts, const elastic::Admission& admission, int rank,
              std::ostream& out) {
  trainer.adopt_progress(admission.step, admission.loader);
  const elastic::RecoveryReport r = parts.run.complete_join(trainer);
  out << "rank " << rank << ": joined the run after step " << r.resume_step << "\n"
            << trainer.describe() << std::endl;
}

// Dispatch by length: starts deciding from the trainer's data position and hooks into the loop.
void start_dispatch(LengthDispatchRun& by_length, runtime::TrainingLoop& loop, const runtime::DistTrainer& trainer,
                    const data::TokenDataset& dataset, const TrainArgs& args, bool lead, std::ostream& out) {
  if (lead) out << by_length.describe() << std::endl;
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

}  // namespace

struct TrainWorker::Parts {
  TrainArgs args;
  std::ostream& out;
  comm::WorkerEnv env;
  std::shared_ptr<const models::Model> model;
  std::optional<data::TokenDataset> dataset, validation;
  WorkerPlans w;
  sharding::Strategy first_strategy;
  std::optional<runtime::EmulatedDevices> devices;
  std::shared_ptr<comm::Store> store;
  std::optional<elastic::Admission> admission;
  std::unique_ptr<comm::GroupCache> groups;
  std::optional<resolve::Topology> cluster;
  std::unique_ptr<runtime::DistTrainer> trainer;
  std::unique_ptr<ElasticParts> elastic;
  std::unique_ptr<runtime::TrainingLog> log;
  std::unique_ptr<runtime::TrainingLoop> loop;
  std::unique_ptr<runtime::ScheduledSwitches> switches;

  Parts(const TrainArgs& a, std::shared_ptr<const models::Model> m, std::ostream& o) : args(a), out(o), model(std::move(m)) {}
};

TrainWorker::TrainWorker(const TrainArgs& args, std::shared_ptr<const models::Model> model,
                         std::optional<comm::WorkerEnv> env, std::ostream& out)
    : parts_(std::make_unique<Parts>(args, std::move(model), out)) {
  Parts& p = *parts_;
  p.env = env.value_or(comm::WorkerEnv{});
  if (!args.data.empty()) p.dataset = data::TokenDataset::open(args.data);
  if (args.eval_every > 0) {
    HSPMD_CHECK(!args.data.empty()) << "--eval-every reads the validation split of --data; give --data";
    p.validation = data::TokenDataset::open_validation(args.data);
  }
  const bool one_process = args.strategy.empty() && !args.strategy_value && args.strategies_for_max_len.empty();
  if (one_process) {  // the single-process trainer's plan (runtime/trainer.h)
    HSPMD_CHECK(p.env.world_size == 1) << "a run of " << p.env.world_size
                                       << " processes needs a strategy (--strategy) saying what each rank does";
    HSPMD_CHECK(args.switches.empty() && !args.dispatch && !args.elastic && args.devices.empty())
        << "--switch, --dispatch, --elastic and --devices need --strategy (distributed training)";
    sharding::Strategy single = runtime::single_rank_strategy(*p.model, args.options);
    sharding::AnnotationPlan plan = p.model->compile_plan(single);
    p.w.plans.push_back({1, "", std::move(single), std::move(plan)});
    p.w.world = 1;
  } else {
    HSPMD_CHECK(p.dataset || args.strategies_for_max_len.empty())
        << "dispatch by length (--strategy-for-max-len) reads its batches from --data; give --data";
    p.w = worker_plans(args, *p.model, *p.dataset, p.env.world_size);
  }
  const int world = p.w.world;
  p.devices = args.devices.empty() ? runtime::EmulatedDevices(world) : runtime::EmulatedDevices::from_file(args.devices, world);
  p.w.in_force = plan_in_force(args, p.w.plans);

  const auto timeout = std::chrono::duration_cast<comm::Millis>(std::chrono::duration<double>(args.comm_timeout));
  if (env) {
    p.store = comm::open_run_store(p.env);
    p.admission = admission_of(args, *p.store, p.env.rank, world);
  }
  p.cluster = cluster_of(args, world);
  runtime::DistOptions options = worker_options(args, p.w, p.devices->of(p.env.rank), p.cluster ? &*p.cluster : nullptr,
                                                p.admission ? &*p.admission : nullptr);
  // The rank's compute device exists before its groups: an NCCL communicator orders its operations
  // after that device's compute stream.
  const runtime::CommKind comm_kind = runtime::choose_comm(
      args.comm.empty() ? std::nullopt : std::optional(runtime::parse_comm(args.comm)), args.options.device);
  options.train.device = runtime::rank_device(args.options.device, comm_kind, p.env.local_rank);
  const graph::ComputeDevice compute = runtime::rank_compute(options.train, options.device, p.env.rank);
  options.compute = [compute](int) { return compute; };
  if (env) {
    p.groups = std::make_unique<comm::GroupCache>(p.store, p.env.rank,
                                                  runtime::comm_backend(comm_kind, compute, timeout, p.env.host),
                                                  p.admission ? p.admission->generation : 0);
    options.comm_on_device = comm_kind == runtime::CommKind::kNccl;
  } else {  // one process: its groups are groups of one (comm/self_communicator.h), host buffers
    HSPMD_CHECK(!args.elastic) << "--elastic needs workers started by `hspmd launch`";
    p.groups = std::make_unique<comm::GroupCache>(nullptr, 0, nullptr);
  }
  if (one_process) options.plan_name = "single-process";
  p.first_strategy = p.admission ? p.admission->strategy : p.w.state_plan().strategy;
  p.trainer = std::make_unique<runtime::DistTrainer>(
      p.model, p.dataset ? &*p.dataset : nullptr,
      p.admission ? p.model->compile_plan(p.first_strategy) : p.w.state_plan().plan, options, p.env.rank, world,
      *p.groups);
  if (args.elastic) {
    p.elastic = std::make_unique<ElasticParts>(args, *p.model, p.store, p.env.rank, world, *p.groups,
                                               p.admission ? &*p.admission : nullptr);
    p.elastic->run.attach(*p.trainer, p.first_strategy);
  }
  const bool lead = is_lead();
  if (lead && !one_process) print_run_header(args, p.w, *p.devices, p.out);
  if (!one_process) p.out << p.trainer->describe() << std::endl;
  start_from(*p.trainer, args, lead, p.out);
  if (p.w.base && !p.admission) compute_under_first_plan(*p.trainer, p.w, lead, p.out);

  p.log = std::make_unique<runtime::TrainingLog>(
      p.out, runtime::TrainingLogOptions{.total_steps = args.options.steps,
                                         .metrics_path = lead ? args.metrics : "",
                                         .append = !args.resume.empty()});
  p.log->set_reporting([this] { return is_lead(); });
  if (p.admission) join_run(*p.trainer, *p.elastic, *p.admission, p.env.rank, p.out);
  p.loop = std::make_unique<runtime::TrainingLoop>(*p.trainer, *p.log,
                                                   loop_options(args, p.validation ? &*p.validation : nullptr));
  if (p.w.by_length) start_dispatch(*p.w.by_length, *p.loop, *p.trainer, *p.dataset, args, lead, p.out);
  p.switches = std::make_unique<runtime::ScheduledSwitches>(std::move(p.w.plans), p.w.in_force);
  p.switches->set_bsr_algorithm(resolve::parse_bsr_algorithm(args.switch_bsr));
  p.loop->add_hook(*p.switches);
  if (p.elastic) {
    p.switches->set_route(&p.elastic->hook);
    p.loop->add_hook(p.elastic->hook);
  }
}

TrainWorker::~TrainWorker() = default;

runtime::DistTrainer& TrainWorker::trainer() { return *parts_->trainer; }
runtime::TrainingLoop& TrainWorker::loop() { return *parts_->loop; }
const models::Model& TrainWorker::model() const { return *parts_->model; }
int TrainWorker::rank() const { return parts_->env.rank; }
int TrainWorker::world_size() const { return parts_->w.world; }
const sharding::Strategy& TrainWorker::strategy() const { return parts_->first_strategy; }

bool TrainWorker::is_lead() const {
  return parts_->env.rank == (parts_->elastic ? parts_->elastic->run.members().front() : 0);
}

runtime::SwitchReport TrainWorker::switch_to(const sharding::Strategy& strategy) {
  Parts& p = *parts_;
  const runtime::ScheduledPlan target{p.trainer->step_count() + 1, "", strategy, p.model->compile_plan(strategy)};
  if (!p.elastic) {
    return p.trainer->switch_to(target.plan, strategy.name, resolve::parse_bsr_algorithm(p.args.switch_bsr));
  }
  const std::string why = p.elastic->hook.unusable(strategy);
  HSPMD_CHECK(why.empty()) << "cannot switch to strategy " << strategy.name << ": " << why;
  return p.elastic->hook.switch_to(*p.trainer, target);
}

void TrainWorker::run_to_end() {
  Parts& p = *parts_;
  p.loop->run();
  if (!p.args.trace.empty()) write_trace(*p.trainer, p.args, p.env.rank);
  if (is_lead() && p.args.check_single) check_single_process(p.args, p.model, *p.dataset, p.loop->losses());
}

namespace {

void run_worker(const TrainArgs& args) {
  TrainWorker worker(args, models::load_model(args.model), comm::WorkerEnv::from_environment(), std::cout);
  worker.run_to_end();
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
  if (bf16_switches(args)) {
    base_strategy_index(args, by_length ? strategies_of(*by_length->strategies)
                                        : strategies_of(scheduled_plans(args, *model)));
  }
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
