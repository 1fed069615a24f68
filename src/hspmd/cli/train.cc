// `hspmd train`: single-process training of a model (its config's model_type) on a token dataset
// (runtime/trainer.h), with checkpoints, resume, Hugging Face weights and per-step metrics. It
// trains through the same loop as every distributed mode (runtime/training_loop.h), as its
// one-rank case; this file sets the run up and reports it.
//
//   hspmd train --model configs/llama-tiny.json --data runs/kjv --steps 200 --save runs/ckpt
//   hspmd train --model configs/llama-tiny.json --data runs/kjv --steps 400 --resume runs/ckpt
//
// On --resume the run's options come from the checkpoint, for one process and for a strategy
// alike; flags given on the command line override them (the data-stream ones, seq-len /
// global-batch-tokens / seed, must not change). Every run writes and reads one checkpoint format
// (runtime/sharded_checkpoint.h): a single-process run's is its one-rank case.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hspmd/cli/commands.h"
#include "hspmd/cli/train_args.h"
#include "hspmd/core/error.h"
#include "hspmd/core/safetensors.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/kernels/gemm_backend.h"
#include "hspmd/kernels/simd.h"
#include "hspmd/models/model_factory.h"
#include "hspmd/resolve/fused_bsr.h"
#include "hspmd/runtime/checkpoint.h"
#include "hspmd/runtime/comm_choice.h"
#include "hspmd/runtime/sharded_checkpoint.h"
#include "hspmd/runtime/trainer.h"
#include "hspmd/runtime/training_log.h"
#include "hspmd/runtime/training_loop.h"

namespace hspmd::cli {
namespace {

// A flag that sets one TrainerOptions field: given flags override a resumed run's options.
struct OptionFlag {
  std::string flag;
  std::function<void(runtime::TrainerOptions& dst, const runtime::TrainerOptions& src)> copy;
};

#define HSPMD_OPTION_FLAG(flag, field) \
  OptionFlag { flag, [](runtime::TrainerOptions& d, const runtime::TrainerOptions& s) { d.field = s.field; } }

const std::vector<OptionFlag>& option_flags() {
  static const std::vector<OptionFlag> flags = {
      HSPMD_OPTION_FLAG("--steps", steps),
      HSPMD_OPTION_FLAG("--seq-len", seq_len),
      HSPMD_OPTION_FLAG("--global-batch-tokens", global_batch_tokens),
      HSPMD_OPTION_FLAG("--lr", lr),
      HSPMD_OPTION_FLAG("--min-lr", min_lr),
      HSPMD_OPTION_FLAG("--warmup", warmup),
      HSPMD_OPTION_FLAG("--decay-steps", decay_steps),
      HSPMD_OPTION_FLAG("--weight-decay", weight_decay),
      HSPMD_OPTION_FLAG("--clip", max_grad_norm),
      HSPMD_OPTION_FLAG("--seed", seed),
      HSPMD_OPTION_FLAG("--recompute", recompute),
      HSPMD_OPTION_FLAG("--threads", threads),
      HSPMD_OPTION_FLAG("--precision", precision),
      HSPMD_OPTION_FLAG("--device", device),  // not in a checkpoint's options: the resumed run's is cpu
  };
  return flags;
}
#undef HSPMD_OPTION_FLAG

}  // namespace

std::string kernels_line(DType precision) {
  return "kernels: GEMM " + kernels::gemm_backend_description() + "; SIMD " +
         kernels::simd_level_name(kernels::simd_level()) + "; precision " +
         (precision == DType::kBFloat16 ? "bf16 (bf16 matmul/attention operands, fp32 accumulation, fp32 master "
                                          "weights and AdamW)"
                                        : "fp32");
}

runtime::TrainerOptions resumed_options(const TrainArgs& args, const CLI::App& sub, const models::Model& model) {
  const nlohmann::json state = runtime::read_checkpoint_state(args.resume);
  HSPMD_CHECK(state.contains("config") && state.contains("options"))
      << "checkpoint " << args.resume << " records no model config or training options";
  runtime::check_same_config(state.at("config"), model, args.resume);
  runtime::TrainerOptions options = runtime::TrainerOptions::from_json(state.at("options"));
  for (const OptionFlag& f : option_flags()) {
    if (sub.count(f.flag) > 0) f.copy(options, args.options);
  }
  return options;
}

namespace {

void run_train(TrainArgs args, const CLI::App& sub) {
  HSPMD_CHECK(args.resume.empty() || args.init_weights.empty()) << "--resume and --init-weights exclude each other";
  if (const char* env = std::getenv("HSPMD_COMM_TIMEOUT"); env != nullptr && sub.count("--comm-timeout") == 0) {
    char* end = nullptr;
    args.comm_timeout = std::strtod(env, &end);
    HSPMD_CHECK(end != env && *end == '\0' && args.comm_timeout > 0)
        << "HSPMD_COMM_TIMEOUT=" << env << " is not a positive number of seconds";
  }
  if (!args.resume.empty()) args.options = resumed_options(args, sub, *models::load_model(args.model));
  const bool distributed = !args.strategy.empty() || !args.strategies_for_max_len.empty();
  // --comm against the device once, before any worker starts.
  runtime::choose_comm(args.comm.empty() ? std::nullopt : std::optional(runtime::parse_comm(args.comm)),
                       args.options.device);
  if (distributed) return run_dist_train(args);
  HSPMD_CHECK(args.nproc == 0 && args.devices.empty() && args.trace.empty() && args.switches.empty() && !args.dispatch &&
              !args.elastic)
      << "--nproc, --devices, --trace, --switch, --dispatch and --elastic need --strategy (distributed training)";
  const std::shared_ptr<const models::Model> model = models::load_model(args.model);
  data::TokenDataset dataset = data::TokenDataset::open(args.data);

  const runtime::TrainerOptions& options = args.options;
  std::optional<data::TokenDataset> validation;
  if (args.eval_every > 0) validation = data::TokenDataset::open_validation(args.data);
  runtime::Trainer trainer(model, dataset, options);
  if (!args.dump_init_weights.empty()) {
    const graph::TensorMap params = trainer.parameters();
    std::vector<std::pair<std::string, Tensor>> tensors(params.begin(), params.end());
    safetensors::save(args.dump_init_weights, tensors, {{"format", "pt"}});
  }
  if (!args.resume.empty()) {
    trainer.restore(args.resume);
    std::cout << "resumed from " << args.resume << " at step " << trainer.step_count() << "\n";
  }
  if (!args.init_weights.empty()) {
    trainer.load_weights(runtime::load_hf_weights(args.init_weights, trainer.model()));
    std::cout << "loaded weights from " << args.init_weights << "\n";
  }

  // A resumed run appends to the metrics of the run it continues.
  runtime::TrainingLog log(std::cout, {.total_steps = options.steps,
                                       .metrics_path = args.metrics,
                                       .append = !args.resume.empty(),
                                       .terminal = ::isatty(STDOUT_FILENO) != 0});
  std::cout << kernels_line(options.precision) << "\n";
  if (options.device.type != DeviceType::kCPU) std::cout << "device: " << options.device.to_string() << "\n";
  std::cout << "model: " << models::num_parameters(*model) << " parameters, " << model->num_layers()
            << " layers, hidden " << model->sizes().hidden << "; data: " << dataset.num_tokens() << " tokens in "
            << dataset.num_documents() << " documents; " << options.steps << " steps of <= "
            << options.global_batch_tokens << " tokens, seq_len " << options.seq_len << "\n";

  runtime::TrainingLoop loop(trainer.distributed(), log, loop_options(args, validation ? &*validation : nullptr));
  loop.run();
  if (!loop.losses().empty()) {
    std::printf("trained steps %lld..%lld in %.1fs: loss %.4f -> %.4f\n", static_cast<long long>(loop.first_step()),
                static_cast<long long>(trainer.step_count()), loop.seconds(), loop.losses().front(),
                loop.losses().back());
  } else {
    std::printf("nothing to do: the run is already at step %lld of %lld\n",
                static_cast<long long>(trainer.step_count()), static_cast<long long>(options.steps));
  }
  if (!args.save.empty()) std::printf("checkpoint: %s\n", args.save.c_str());
}

}  // namespace

void define_train_options(CLI::App* sub, TrainArgs* args) {
  runtime::TrainerOptions& o = args->options;
  sub->add_option("--model", args->model, "model config.json (Hugging Face keys; its model_type picks the model)");
  sub->add_option("--data", args->data, "token dataset directory (made by `hspmd data prepare`)");
  sub->add_option("--steps", o.steps, "optimizer steps of the whole run")->capture_default_str();
  sub->add_option("--seq-len", o.seq_len, "context length (packed row size)")->capture_default_str();
  sub->add_option("--global-batch-tokens", o.global_batch_tokens, "token budget of one step")->capture_default_str();
  sub->add_option("--lr", o.lr, "peak learning rate")->capture_default_str();
  sub->add_option("--min-lr", o.min_lr, "learning rate at the end of the cosine decay")->capture_default_str();
  sub->add_option("--warmup", o.warmup, "linear warm-up steps")->capture_default_str();
  sub->add_option("--decay-steps", o.decay_steps, "schedule length (0: --steps)")->capture_default_str();
  sub->add_option("--weight-decay", o.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  sub->add_option("--clip", o.max_grad_norm, "global gradient-norm clipping (0: none)")->capture_default_str();
  sub->add_option("--seed", o.seed, "seed of parameter init and data order")->capture_default_str();
  sub->add_flag("--recompute", o.recompute, "recompute each layer's activations in the backward pass");
  sub->add_option("--threads", o.threads, "kernel threads (0: all cores)")->capture_default_str();
  sub->add_option_function<std::string>(
         "--precision", [&o](const std::string& name) { o.precision = parse_dtype(name); },
         "fp32 (default), or bf16: bf16 mixed precision (matmuls and attention on bf16 operands with fp32 "
         "accumulation; fp32 master weights, gradients and AdamW states); see docs/mixed-precision.md")
      ->check(CLI::IsMember({"fp32", "bf16", "float32", "bfloat16"}))
      ->default_str("fp32");
  sub->add_option_function<std::string>(
      "--device", [&o](const std::string& name) { o.device = Device::parse(name); },
      "where training runs: cpu (default), or cuda / cuda:N (GPU N: parameters, AdamW state and activations in its "
      "memory, the batch copied in each step; with --strategy see --comm; needs a build with the CUDA backend; "
      "docs/gpu.md)")
      ->default_str("cpu");
  sub->add_option("--save", args->save, "checkpoint directory, written at the end (and every --save-every steps)");
  sub->add_option("--save-every", args->save_every, "also checkpoint every K steps")->check(CLI::NonNegativeNumber);
  sub->add_option("--eval-every", args->eval_every,
                  "every K steps (and after the last) report the loss on the dataset's validation split "
                  "(`data prepare --val-fraction`)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--eval-tokens", args->eval_tokens, "tokens of the validation split each evaluation reads")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--resume", args->resume, "continue the run saved in this checkpoint directory");
  sub->add_option("--init-weights", args->init_weights,
                  "start from Hugging Face weights (a .safetensors file, a sharded set's index.json, or a "
                  "directory with either), fresh optimizer state; distributed ranks read only their slices");
  sub->add_option("--metrics", args->metrics, "append one JSON line of metrics per step to this file");
  // For bench/pytorch_compare.py: the initial weights, to load the same model elsewhere.
  sub->add_option("--dump-init-weights", args->dump_init_weights, "")->group("");
  auto dist = "Distributed (with --strategy)";
  sub->add_option("--strategy", args->strategy, "strategy file (pipelines -> stages -> ranks, layers): train distributed")
      ->group(dist);
  sub->add_option("--nproc", args->nproc, "start this many local worker processes (else run as one worker of `hspmd launch`)")
      ->check(CLI::NonNegativeNumber)->group(dist);
  sub->add_option("--switch", args->switches,
                  "STEP:S.json: before step STEP, switch to strategy S without a restart (one fused BSR of weights "
                  "and Adam states); repeatable")
      ->group(dist);
  sub->add_option("--switch-bsr", args->switch_bsr,
                  "how --switch moves the state: fused (one BSR over every tensor, heuristics), per-tensor (one BSR "
                  "per tensor, heuristics) or per-tensor-lowest-owner (the paper's baselines, for comparison)")
      ->check([](const std::string& v) {
        try {
          resolve::parse_bsr_algorithm(v);
          return std::string();
        } catch (const Error& e) {
          return std::string(e.what());
        }
      })
      ->capture_default_str()
      ->group(dist);
  sub->add_option("--switch-states", args->switch_states,
                  "what a switch (--switch, --strategy-for-max-len) moves: params+adam (float32 weights and Adam "
                  "states, once) or bf16-params (needs --precision bf16: weights and Adam states stay under the "
                  "base strategy, --base-strategy; each step under another sends it the bf16 weights and brings the "
                  "gradients back)")
      ->check(CLI::IsMember({"params+adam", "bf16-params"}))
      ->capture_default_str()
      ->group(dist);
  sub->add_option("--base-strategy", args->base_strategy,
                  "with --switch-states bf16-params: the strategy whose layout holds the float32 weights and Adam "
                  "states, one of the run's strategy files (--strategy, --switch, --strategy-for-max-len); default: "
                  "the one the run starts under")
      ->group(dist);
  sub->add_option("--comm-timeout", args->comm_timeout,
                  "seconds a communication (or connecting) may take before the run fails; cover your slowest "
                  "save or step (default: $HSPMD_COMM_TIMEOUT, else 300)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group(dist);
  sub->add_option("--comm", args->comm,
                  "how ranks communicate: gloo (host memory; GPU ranks stage through the host and all use the "
                  "--device GPU, so several may share it) or nccl (GPU memory; rank L of a host on GPU N+L of "
                  "--device cuda:N). Default: nccl with --device cuda in a build with NCCL, else gloo")
      ->group(dist);
  sub->add_option("--schedule", args->schedule, "pipeline schedule: 1f1b or gpipe")->capture_default_str()->group(dist);
  sub->add_option("--grad-bucket-mb", args->grad_bucket_mb,
                  "MiB of gradient per bucket reduced on a communication thread during the backward pass "
                  "(0: no overlap, every gradient synced after the backward)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group(dist);
  sub->add_option("--devices", args->devices, "emulated devices JSON: per-rank relative speed and memory")->group(dist);
  sub->add_option("--trace", args->trace, "write a Chrome trace per rank (FILE.rank<N>.json)")->group(dist);
  auto planner_inputs = "Planner inputs (--elastic, dispatch by length)";
  sub->add_option("--cluster", args->cluster,
                  "cluster spec JSON (devices, memory, links): --elastic re-plans on it, dispatch prices with it")
      ->group(planner_inputs);
  sub->add_option("--profile", args->profile,
                  "profile JSON (`hspmd profile`): needed by --elastic; dispatch derives one from the cluster's "
                  "peak_flops when absent")
      ->group(planner_inputs);
  auto elastic = "Elastic (with --strategy)";
  sub->add_flag("--elastic", args->elastic,
                "survive dead workers: the others re-plan (--cluster, --profile), move the state from surviving "
                "replicas with one fused BSR (or restore --save's newest checkpoint) and go on")
      ->group(elastic);
  sub->add_option("--heartbeat-timeout", args->heartbeat_timeout,
                  "--elastic: seconds without a heartbeat before a worker counts as dead")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group(elastic);
  sub->add_option("--max-restarts", args->max_restarts,
                  "--elastic with --nproc: start a dead worker again (at most this many times per rank); it joins "
                  "the run at a step boundary and the run re-plans to use it")
      ->check(CLI::NonNegativeNumber)
      ->group(elastic);
  auto by_length = "Dispatch by length (docs/dispatch.md)";
  sub->add_option("--strategy-for-max-len", args->strategies_for_max_len,
                  "MAXLEN:S.json: strategy S for batches whose longest sequence is at most MAXLEN tokens; repeatable. "
                  "Each step runs the one predicted fastest for its batch (switch cost included), each pipeline fed "
                  "the sequences the dispatcher assigns it; needs --cluster")
      ->group(by_length);
  sub->add_flag("--dispatch", args->dispatch,
                "dispatch each batch's sequences over the pipelines of --strategy by the cost model (needs --cluster)")
      ->group(by_length);
  sub->add_option("--dispatch-ahead", args->dispatch_ahead,
                  "dispatch decisions computed ahead of training, in a background thread")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group(by_length);
  sub->add_flag("--check-single", args->check_single,
                "afterwards, rank 0 retrains in one process and compares every step's loss")->group(dist);
}

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* sub = app.add_subcommand(
      "train", "Train a model on a token dataset: one process, or distributed with --strategy");
  define_train_options(sub, args.get());
  sub->get_option("--model")->required();
  sub->get_option("--data")->required();
  sub->callback([args, sub] { run_train(*args, *sub); });
}

}  // namespace hspmd::cli
