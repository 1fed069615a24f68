// `hspmd model info`: what a Hugging Face config.json makes hspmd build, and whether a checkpoint
// holds exactly those weights.
//
//   hspmd model info hf/llama-tiny/config.json
//   hspmd model info hf/llama-tiny --weights hf/llama-tiny     # a save_pretrained directory
//   -> what the model says of itself (models::Model::describe(): for the Llama families the
//      architecture, the RoPE in use with its inverse frequencies, the parameter count, every
//      parameter's shape, one decoder layer standing for all), then with --weights:
//      "weights: ... all 21 tensors present with the config's shapes and dtype bfloat16", or every
//      missing, extra or mismatched tensor by name and exit status 1.
// A config hspmd would compute differently from transformers is refused here too, with the same
// one-line error as `hspmd train` and `hspmd eval` give.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "hspmd/cli/commands.h"
#include "hspmd/core/error.h"
#include "hspmd/models/model_factory.h"
#include "hspmd/runtime/hf_weights.h"

namespace hspmd::cli {
namespace {

struct ModelInfoArgs {
  std::string config, weights;
};

void run_model_info(const ModelInfoArgs& args) {
  const std::shared_ptr<const models::Model> model = models::load_model(args.config);
  std::printf("config: %s\n%s", args.config.c_str(), model->describe().c_str());
  if (args.weights.empty()) return;
  const std::vector<std::string> files = runtime::hf_weight_files(args.weights);
  const runtime::HfWeightsAudit audit = runtime::audit_hf_weights(args.weights, *model, /*check_dtype=*/true);
  HSPMD_CHECK(audit.ok()) << "weights " << args.weights << " do not match config " << args.config << ":\n"
                          << audit.problems();
  std::printf("weights: %s (%zu file%s): all %zu tensors present with the config's shapes and dtype %s, none extra\n",
              args.weights.c_str(), files.size(), files.size() == 1 ? "" : "s", audit.found.size(),
              model->hf_weights_dtype().c_str());
}

}  // namespace

void add_model_command(CLI::App& app) {
  CLI::App* model = app.add_subcommand("model", "Inspect a Hugging Face model config and its weights");
  model->require_subcommand(1);
  auto args = std::make_shared<ModelInfoArgs>();
  CLI::App* info = model->add_subcommand(
      "info", "Parameter count, per-layer shapes and RoPE settings of CONFIG; with --weights, check that the "
              "checkpoint holds exactly the tensors the config implies (names of missing and extra ones)");
  info->add_option("config", args->config, "config.json, or a save_pretrained directory holding one")->required();
  info->add_option("--weights", args->weights,
                   "safetensors file or save_pretrained directory (model.safetensors or its sharded index)");
  info->callback([args] { run_model_info(*args); });
}

}  // namespace hspmd::cli
