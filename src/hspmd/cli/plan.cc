// `hspmd plan --model CONFIG --cluster C.json --profile P.json --global-batch B --seq-len S
//  --out S.json`: writes the planner's strategy (planner/planner.h) for the model on the cluster,
// and prints its predicted step time, the memory of every rank and how long planning took.
//
//   hspmd plan --model configs/llama-32b.json --cluster examples/clusters/paper-16h800-32h20.json
//       --profile examples/profiles/paper-h800-h20-llama-32b.json --global-batch 64 --seq-len 4096
//       --out runs/plan-32b.json                                        (one line)
//
// Re-planning after a membership change (elastic training): --previous OLD.json --ranks 0-14,16-47
// plans on those ranks only, preferring plans that move little state away from OLD.json.
//
// Mixed-length data (planner/mixed_length_planner.h, docs/dispatch.md): --data DIR
// --global-batch-tokens N plans from the dataset's segment lengths at --seq-len: OUT gets the
// heterogeneous strategy, OUT-max<L>.json one strategy per maximum length, and the command prints
// the `hspmd train --strategy-for-max-len` flags that use them.
#include <CLI/CLI.hpp>

#include <chrono>
#include <iostream>
#include <memory>
#include <string>

#include "hspmd/core/atomic_file.h"
#include "hspmd/core/byte_size.h"
#include "hspmd/core/elapsed.h"
#include "hspmd/core/error.h"
#include "hspmd/data/length_histogram.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/models/model_factory.h"
#include "hspmd/planner/mixed_length_planner.h"
#include "hspmd/planner/planner.h"
#include "hspmd/planner/profile.h"
#include "hspmd/resolve/topology.h"
#include "hspmd/sharding/device_group.h"
#include "hspmd/sharding/strategy.h"
#include "hspmd/specialize/schedule.h"

namespace hspmd::cli {

namespace {

struct PlanOptions {
  std::string model, cluster, profile, out, previous, ranks, schedule = "1f1b", name, data;
  int64_t global_batch = 0, seq_len = 0, global_batch_tokens = 0;
  int methods_per_interval = 2;
  double time_limit = 0, progress_interval = 5, grad_bucket_mb = 25;
  bool no_zero1 = false, no_zero2 = false, no_zero3 = false, no_sequence_parallel = false;
  std::vector<int> micro_batch_sizes, cp_degrees;
};

void write_strategy(const sharding::Strategy& st, const std::string& path) {
  const std::string text = st.to_json_text() + "\n";
  AtomicFile out(path);
  out.write(text.data(), text.size());
  out.commit();
}

void run_mixed_length_plan(const PlanOptions& o, const models::Model& model, const resolve::Topology& topo,
                           const planner::Profile& profile) {
  HSPMD_CHECK(o.global_batch_tokens > 0) << "--data needs --global-batch-tokens N (tokens per step)";
  HSPMD_CHECK(o.previous.empty() && o.ranks.empty()) << "--data plans for every device; --previous/--ranks do not apply";
  const data::TokenDataset ds = data::TokenDataset::open(o.data);
  const data::LengthHistogram h = data::length_histogram(ds, o.seq_len);
  std::cout << "planning " << o.model << " for the segment lengths of " << o.data << " at --seq-len " << o.seq_len
            << ", " << o.global_batch_tokens << " tokens per step, on " << topo.name() << " (" << topo.num_devices()
            << " devices), profile " << o.profile << " (" << profile.source << ")\n"
            << h.to_string();
  const auto start = std::chrono::steady_clock::now();
  planner::MixedLengthOptions mo{.seq_len = o.seq_len,
                                 .global_batch_tokens = o.global_batch_tokens,
                                 .name = o.name.empty() ? "mixed" : o.name,
                                 .methods_per_interval = o.methods_per_interval,
                                 .grad_bucket_mb = o.grad_bucket_mb,
                                 .sequence_parallel = !o.no_sequence_parallel};
  if (!o.micro_batch_sizes.empty()) mo.micro_batch_sizes = o.micro_batch_sizes;
  if (!o.cp_degrees.empty()) mo.cp_degrees = o.cp_degrees;
  const planner::MixedLengthPlan plan = planner::plan_mixed_length(model, topo, profile, h.segment_lengths, mo);
  std::cout << plan.to_string() << "planning time: "
            << seconds_since(start) << " s\n";
  write_strategy(plan.heterogeneous, o.out);
  std::cout << "wrote " << o.out << "\n";
  const std::string stem = o.out.ends_with(".json") ? o.out.substr(0, o.out.size() - 5) : o.out;
  std::string flags;
  for (const planner::LengthStrategy& s : plan.per_max_length) {
    const std::string path = stem + "-max" + std::to_string(s.max_len) + ".json";
    write_strategy(s.strategy, path);
    std::cout << "wrote " << path << "\n";
    flags += " --strategy-for-max-len " + std::to_string(s.max_len) + ":" + path;
  }
  std::cout << "train with: hspmd train ... --seq-len " << o.seq_len << " --global-batch-tokens " << o.global_batch_tokens
            << flags << " --cluster " << o.cluster << " --profile " << o.profile << "\n";
}

void run_plan(const PlanOptions& o) {
  const std::shared_ptr<const models::Model> model = models::load_model(o.model);
  const resolve::Topology topo = resolve::Topology::from_file(o.cluster);
  const planner::Profile profile = planner::Profile::from_file(o.profile);
  if (!o.data.empty()) return run_mixed_length_plan(o, *model, topo, profile);
  HSPMD_CHECK(o.global_batch > 0) << "--global-batch N (sequences per step) is required without --data";
  planner::PlannerOptions po;
  po.global_batch = o.global_batch;
  po.seq_len = o.seq_len;
  po.zero1 = !o.no_zero1;
  po.zero2_when_tight = !o.no_zero2;
  po.zero3_when_tight = !o.no_zero3;
  po.search_sequence_parallel = !o.no_sequence_parallel;
  po.schedule = specialize::parse_schedule_kind(o.schedule);
  po.grad_bucket_mb = o.grad_bucket_mb;
  po.micro_batch_sizes = o.micro_batch_sizes;
  po.cp_degrees = o.cp_degrees;
  po.time_limit_seconds = o.time_limit;
  po.progress_interval_seconds = o.progress_interval;
  po.progress = [](const planner::PlanningProgress& p) { std::cerr << p.to_string() << std::endl; };
  po.name = o.name.empty() ? "planned-" + std::to_string(o.global_batch) + "x" + std::to_string(o.seq_len) : o.name;
  std::vector<int> ranks;
  if (!o.ranks.empty()) {
    try {
      ranks = sharding::DeviceGroup::parse("[" + o.ranks + "]").devices();
    } catch (const Error& e) {
      HSPMD_THROW() << "--ranks: " << e.what();
    }
  }
  std::cout << "planning " << o.model << " (" << model->num_layers() << " layers) on " << topo.name() << " ("
            << topo.num_devices() << " devices), global batch " << o.global_batch << " x " << o.seq_len
            << " tokens, profile " << o.profile << " (" << profile.source << ")\n";
  planner::Plan plan;
  if (!o.previous.empty()) {
    HSPMD_CHECK(!ranks.empty()) << "--previous needs --ranks: the ranks available to the new plan";
    const sharding::Strategy previous = sharding::Strategy::from_file(o.previous);
    po.devices = ranks;
    const planner::Planner planner(*model, topo, profile, po);
    plan = planner.replan(previous, ranks);
  } else {
    po.devices = ranks;
    const planner::Planner planner(*model, topo, profile, po);
    plan = planner.plan();
  }
  std::cout << planner::describe_plan(plan) << planner::to_string(plan.prediction);
  for (const std::string& idle : plan.idle) std::cout << "idle: " << idle << "\n";
  if (!o.previous.empty()) {
    std::cout << "state to move from " << o.previous << ": " << format_bytes(plan.moved_bytes) << "\n";
  }
  if (!plan.complete) {
    std::cout << "time limit of " << o.time_limit << " s reached: this is the best plan found, the search was not "
              << "complete (unsearched configurations have lower bounds from " << plan.lowest_bound_left << " s)\n";
  }
  std::cout << "planning time: " << plan.planning_seconds << " s (" << plan.candidates
            << " pipeline configurations, " << plan.candidates_solved << " solved at level 2, " << plan.milps
            << " integer programs solved by CBC)\n";
  write_strategy(plan.strategy, o.out);
  std::cout << "wrote " << o.out << "\n";
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto opts = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand("plan", "Generate a strategy file from a cluster spec and a profile (planner)");
  cmd->add_option("--model", opts->model, "model config.json (Hugging Face style)")->required();
  cmd->add_option("--cluster", opts->cluster, "cluster spec JSON (devices, memory, link bandwidths)")->required();
  cmd->add_option("--profile", opts->profile, "profile JSON from `hspmd profile` (or examples/profiles/)")->required();
  cmd->add_option("--global-batch", opts->global_batch, "sequences per step (without --data)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--data", opts->data,
                  "token dataset: plan for its segment lengths (mixed-length planner; writes OUT and OUT-max<L>.json "
                  "strategies per maximum length, docs/dispatch.md)");
  cmd->add_option("--global-batch-tokens", opts->global_batch_tokens, "tokens per step (with --data)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seq-len", opts->seq_len, "tokens per sequence")->required()->check(CLI::PositiveNumber);
  cmd->add_option("--out", opts->out, "where to write the strategy file")->required();
  cmd->add_option("--micro-batch-sizes", opts->micro_batch_sizes,
                  "micro-batch sizes to consider (default: powers of two up to 8 dividing the global batch; with "
                  "--data: 1,2,4 rows of --seq-len tokens)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--cp-degrees", opts->cp_degrees,
                  "context-parallel degrees to search, e.g. 1,2,4 (default: 1,2,4,8 from --seq-len 8192 on, 1 "
                  "below, i.e. no CP; each configuration takes one for all its stages; with --data: 1,2,4,8)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--methods-per-interval", opts->methods_per_interval,
                  "with --data: parallel methods one length interval may combine (each any number of pipelines)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--schedule", opts->schedule, "pipeline schedule: 1f1b or gpipe")->capture_default_str();
  cmd->add_option("--grad-bucket-mb", opts->grad_bucket_mb,
                  "the gradient buckets `hspmd train --grad-bucket-mb` will run with: the cost model hides that "
                  "much of the gradient sync behind the backward passes (0: the sync runs after them)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--no-zero1", opts->no_zero1, "keep optimizer states whole on every replica (default: ZeRO-1 on)");
  cmd->add_flag("--no-zero2", opts->no_zero2,
                "never fall back to ZeRO-2 (gradients sharded too) when memory binds under ZeRO-1");
  cmd->add_flag("--no-zero3", opts->no_zero3,
                "never fall back to ZeRO-3 (weights sharded too, gathered per layer) when memory binds under ZeRO-2");
  cmd->add_flag("--no-sequence-parallel", opts->no_sequence_parallel,
                "never write \"sequence_parallel\" on TP stages (default: where it fits when nothing else does, or is "
                "faster)");
  cmd->add_option("--ranks", opts->ranks, "ranks the plan may use, e.g. 0-14,16-47 (default: every device)");
  cmd->add_option("--previous", opts->previous,
                  "re-plan from this strategy (with --ranks: the surviving and added ranks), moving little state");
  cmd->add_option("--name", opts->name, "the strategy's name (default planned-<batch>x<seq>)");
  cmd->add_option("--time-limit", opts->time_limit,
                  "stop searching after this many seconds and write the best plan found so far, marked as such "
                  "(default 0: search to the end)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--progress-interval", opts->progress_interval,
                  "seconds between progress lines on stderr while the search runs")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->callback([opts] { run_plan(*opts); });
}

}  // namespace hspmd::cli
