// `hspmd model info`: what a Hugging Face config.json makes hspmd build, and whether a checkpoint
// holds exactly those weights.
//
//   hspmd model info hf/llama-tiny/config.json
//   hspmd model info hf/llama-tiny --weights hf/llama-tiny     # a save_pretrained directory
//   -> the architecture, the RoPE in use (type, theta, scaling, inverse frequencies), the parameter
//      count, every parameter's shape (one decoder layer stands for all), then with --weights:
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
#include "hspmd/models/llama_config.h"
#include "hspmd/models/llama_model.h"
#include "hspmd/runtime/hf_weights.h"

namespace hspmd::cli {
namespace {

struct ModelInfoArgs {
  std::string config, weights;
};

void print_architecture(const models::LlamaConfig& c) {
  std::printf("architecture: Llama, %lld layers, hidden %lld, intermediate %lld, vocab %lld\n",
              static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
              static_cast<long long>(c.intermediate_size), static_cast<long long>(c.vocab_size));
  std::printf("attention: %lld query heads over %lld key/value heads, head dim %lld%s\n",
              static_cast<long long>(c.num_attention_heads), static_cast<long long>(c.num_key_value_heads),
              static_cast<long long>(c.head_dim()),
              c.explicit_head_dim > 0 ? " (head_dim, not hidden / heads)" : "");
  std::printf("norm: RMSNorm eps %g; MLP: silu(gate) * up; embeddings %s; weights stored as %s\n", c.rms_norm_eps,
              c.tie_word_embeddings ? "tied (lm_head reads embed_tokens)" : "untied", c.weights_dtype.c_str());
  std::printf("rope: %s, max_position_embeddings %lld\n", c.rope.to_string().c_str(),
              static_cast<long long>(c.max_position_embeddings));
  const std::vector<double> inv_freq = c.rope.inverse_frequencies(c.head_dim());
  std::printf("rope inverse frequencies (%zu):", inv_freq.size());
  for (double f : inv_freq) std::printf(" %.6g", f);
  std::printf("\n");
}

void print_parameters(const models::LlamaConfig& c) {
  const std::vector<models::LlamaParam> params = models::llama_parameters(c);
  std::printf("parameters: %lld\n", static_cast<long long>(c.num_parameters()));
  int64_t per_layer = 0;
  for (const models::LlamaParam& p : params) {
    if (p.layer > 0) continue;  // layer 0 stands for every decoder layer
    if (p.layer == 0) per_layer += p.shape.numel();
    std::printf("  %-50s %s\n", p.name.c_str(), p.shape.to_string().c_str());
  }
  if (c.num_hidden_layers > 1) {
    std::printf("  (layers 1..%lld: the same shapes; %lld parameters per layer)\n",
                static_cast<long long>(c.num_hidden_layers - 1), static_cast<long long>(per_layer));
  }
  if (c.tie_word_embeddings) std::printf("  lm_head: tied to model.embed_tokens.weight\n");
}

void run_model_info(const ModelInfoArgs& args) {
  const models::LlamaConfig config = models::LlamaConfig::from_file(args.config);
  std::printf("config: %s\n", args.config.c_str());
  print_architecture(config);
  print_parameters(config);
  if (args.weights.empty()) return;
  const std::vector<std::string> files = runtime::hf_weight_files(args.weights);
  const runtime::HfWeightsAudit audit =
      runtime::audit_hf_weights(args.weights, models::Llama(config), /*check_dtype=*/true);
  HSPMD_CHECK(audit.ok()) << "weights " << args.weights << " do not match config " << args.config << ":\n"
                          << audit.problems();
  std::printf("weights: %s (%zu file%s): all %zu tensors present with the config's shapes and dtype %s, none extra\n",
              args.weights.c_str(), files.size(), files.size() == 1 ? "" : "s", audit.found.size(),
              config.weights_dtype.c_str());
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
