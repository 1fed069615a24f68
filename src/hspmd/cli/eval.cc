// `hspmd eval`: mean token loss and perplexity of a model's weights on a token dataset
// (runtime/evaluate.h).
//
//   hspmd eval --model configs/llama-tiny.json --weights runs/ckpt --data runs/kjv --max-tokens 65536
//   -> eval: 65536 tokens (65210 labelled) in 3.1s: mean loss 1.834213, perplexity 6.261
//   hspmd eval --model hf/llama-tiny --data runs/kjv    # a save_pretrained directory: config + weights
//
// --weights is a checkpoint directory (hspmd train --save, one process or any strategy), a Hugging
// Face safetensors file or save_pretrained directory; without it, --model must be such a
// directory. The loss has 6 decimals so that it can be compared with transformers' to 1e-5.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "hspmd/cli/commands.h"
#include "hspmd/core/error.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/kernels/threading.h"
#include "hspmd/models/model_factory.h"
#include "hspmd/runtime/checkpoint.h"
#include "hspmd/runtime/sharded_checkpoint.h"
#include "hspmd/runtime/evaluate.h"
#include "hspmd/runtime/hf_weights.h"
#include "hspmd/runtime/train_options.h"

namespace hspmd::cli {
namespace {

struct EvalArgs {
  std::string model, weights, data;
  bool validation = false;  // the dataset's held-out split instead of its training split
  int threads = 0;
  runtime::EvalOptions options;
};

void run_eval(const EvalArgs& args) {
  const std::shared_ptr<const models::Model> model = models::load_model(args.model);
  data::TokenDataset dataset =
      args.validation ? data::TokenDataset::open_validation(args.data) : data::TokenDataset::open(args.data);
  runtime::check_dataset_fits(dataset, *model);
  const std::string weights_path = args.weights.empty() ? args.model : args.weights;
  HSPMD_CHECK(!args.weights.empty() || runtime::is_hf_weights(args.model))
      << "--weights is needed: --model " << args.model << " is not a save_pretrained directory with weights";
  HSPMD_CHECK(std::filesystem::exists(weights_path)) << "weights " << weights_path << " do not exist";
  HSPMD_CHECK(runtime::is_hf_weights(weights_path) || std::filesystem::is_directory(weights_path))
      << "--weights " << weights_path << " is neither a checkpoint directory (hspmd train --save) nor Hugging Face "
      << "weights (a .safetensors file, or a directory with model.safetensors or its index)";
  if (args.threads > 0) kernels::set_num_threads(args.threads);
  graph::TensorMap weights = runtime::is_hf_weights(weights_path)
                                 ? runtime::load_hf_weights(weights_path, *model)
                                 : runtime::read_checkpoint_weights(weights_path, *model);
  runtime::EvalResult r = runtime::evaluate(*model, weights, dataset, args.options);
  std::printf("eval: %lld tokens (%lld labelled) in %.1fs: mean loss %.6f, perplexity %.3f\n",
              static_cast<long long>(r.tokens), static_cast<long long>(r.label_tokens), r.seconds, r.mean_loss,
              r.perplexity);
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* sub = app.add_subcommand("eval", "Mean token loss and perplexity of a model on a token dataset");
  sub->add_option("--model", args->model,
                  "model config.json (Hugging Face keys; its model_type picks the model), or a save_pretrained "
                  "directory")
      ->required();
  sub->add_option("--weights", args->weights,
                  "checkpoint directory (hspmd train --save), Hugging Face safetensors file or save_pretrained "
                  "directory (default: --model, when it is a save_pretrained directory)");
  sub->add_option("--data", args->data, "token dataset directory (made by `hspmd data prepare`)")->required();
  sub->add_flag("--validation", args->validation,
                "evaluate on the dataset's held-out validation split (`hspmd data prepare --val-fraction`)");
  sub->add_option("--max-tokens", args->options.max_tokens, "stop after this many tokens (0: whole dataset)")
      ->capture_default_str();
  sub->add_option("--seq-len", args->options.seq_len, "context length")->capture_default_str();
  sub->add_option("--batch-tokens", args->options.batch_tokens, "tokens per forward pass")->capture_default_str();
  sub->add_option("--threads", args->threads, "kernel threads (0: all cores)")->capture_default_str();
  sub->callback([args] { run_eval(*args); });
}

}  // namespace hspmd::cli
