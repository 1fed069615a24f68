// `hspmd checkpoint info DIR`: what a checkpoint directory holds, after verifying it.
// `hspmd checkpoint export DIR --to-hf OUT`: its weights as Hugging Face's save_pretrained writes
// them (runtime/hf_export.h).
//
//   hspmd checkpoint info runs/ckpt
//   hspmd checkpoint export runs/ckpt --to-hf runs/hf    # then: hspmd eval --model runs/hf ...
//
// Every run writes one format (runtime/sharded_checkpoint.h: index.json plus one safetensors file
// per rank that holds state; a single process is one rank); the older single-process format
// (runtime/checkpoint.h: trainer_state.json, model.safetensors, optimizer.safetensors) is read too. Every file's size and CRC-32 is verified first
// (ShardedCheckpoint::open reads both formats), so what is printed describes a checkpoint a run can
// load. No tensor data is read beyond the checksums.
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "hspmd/core/error.h"
#include "hspmd/core/json_file.h"
#include "hspmd/core/safetensors.h"
#include "hspmd/models/model_factory.h"
#include "hspmd/runtime/hf_export.h"
#include "hspmd/runtime/checkpoint.h"
#include "hspmd/runtime/sharded_checkpoint.h"

namespace hspmd::cli {
namespace {

namespace fs = std::filesystem;

// The sharded format's index file and format tag (runtime/sharded_checkpoint.h).
constexpr const char* kShardedIndexFile = "index.json";
constexpr const char* kShardedFormat = "hspmd-sharded-checkpoint-v1";

struct TensorTotals {
  uint64_t count = 0;
  uint64_t bytes = 0;
  uint64_t parameters = 0;  // tensors that are weights, not AdamW moments
};

bool is_optimizer_moment(const std::string& name) {
  auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".exp_avg") || ends_with(".exp_avg_sq");
}

std::string model_summary(const nlohmann::json& config_json, const std::string& source) {
  return models::model_from_config_text(config_json.dump(), source)->summary();
}

// "lr=0.001 steps=8 ..." in the JSON's (sorted) key order.
std::string key_values(const nlohmann::json& object) {
  std::ostringstream s;
  const char* separator = "";
  for (const auto& [key, value] : object.items()) {
    s << separator << key << "=" << value.dump();
    separator = " ";
  }
  return s.str();
}

void print_row(const std::string& label, const std::string& value) {
  std::cout << label << std::string(label.size() < 12 ? 12 - label.size() : 1, ' ') << value << "\n";
}

// The state both formats share (step, seed, loader, config, options), then any other key.
void print_state(const nlohmann::json& state, const std::string& source) {
  const std::string where = source + ": ";
  print_row("step", json_member(state, "step", source).dump());
  if (state.contains("seed")) print_row("seed", state["seed"].dump());
  print_row("model", model_summary(json_member(state, "config", source), source + ": config"));
  const nlohmann::json& options = json_member(state, "options", source);
  HSPMD_CHECK(options.is_object()) << where << "\"options\" is a " << options.type_name() << ", expected an object";
  print_row("options", key_values(options));
  if (state.contains("loader")) print_row("loader", key_values(state["loader"]));
  for (const auto& [key, value] : state.items()) {
    if (key == "step" || key == "seed" || key == "config" || key == "options" || key == "loader" || key == "format" ||
        key == "files") {
      continue;  // printed above, or by the format-specific part
    }
    print_row(key, value.is_object() ? key_values(value) : value.dump());
  }
}

std::string totals_text(const TensorTotals& t) {
  std::ostringstream s;
  s << t.count << " (" << t.parameters << " weights, " << t.count - t.parameters << " AdamW moments), " << t.bytes
    << " bytes";
  return s.str();
}

void print_single_process(const std::string& dir) {
  const nlohmann::json state = runtime::read_trainer_state(dir);  // verifies both files' size and CRC
  const std::string source = (fs::path(dir) / runtime::kTrainerStateFile).string();
  print_row("format", json_member(state, "format", source).get<std::string>() + " (single process, older format)");
  print_state(state, source);
  TensorTotals totals;
  for (const char* file : {runtime::kModelFile, runtime::kOptimizerFile}) {
    safetensors::Reader reader((fs::path(dir) / file).string());
    for (const auto& t : reader.tensors()) {
      ++totals.count;
      totals.bytes += t.nbytes();
      if (!is_optimizer_moment(t.name)) ++totals.parameters;
    }
  }
  print_row("tensors", totals_text(totals));
  print_row("files", std::string(runtime::kTrainerStateFile) + ", " + runtime::kModelFile + ", " +
                         runtime::kOptimizerFile + " (sizes and CRC-32 verified)");
}

void print_sharded(const std::string& dir) {
  runtime::ShardedCheckpoint::open(dir);  // verifies every file's size and CRC and every tensor's tiling
  const std::string source = (fs::path(dir) / kShardedIndexFile).string();
  const nlohmann::json index = parse_json_object(read_text_file(source, "checkpoint index"), source);
  const nlohmann::json& files = json_member(index, "files", source);
  const nlohmann::json& tensors = json_member(index, "tensors", source);
  const nlohmann::json& world_size = json_member(index, "world_size", source);
  const int64_t ranks = world_size.get<int64_t>();
  print_row("format", json_member(index, "format", source).get<std::string>() + " (" + std::to_string(ranks) +
                          (ranks == 1 ? " rank, " : " ranks, ") + std::to_string(files.size()) +
                          (files.size() == 1 ? " shard file)" : " shard files)"));
  print_state(json_member(index, "state", source), source + ": state");
  TensorTotals totals;
  uint64_t shards = 0;
  for (const auto& [name, entry] : tensors.items()) {
    uint64_t elements = 1;
    for (const auto& extent : json_member(entry, "shape", source + ": tensors." + name)) {
      elements *= extent.get<uint64_t>();
    }
    ++totals.count;
    totals.bytes += elements * sizeof(float);  // the sharded format stores float32 only
    if (!is_optimizer_moment(name)) ++totals.parameters;
    shards += json_member(entry, "shards", source + ": tensors." + name).size();
  }
  print_row("tensors", totals_text(totals) + " in " + std::to_string(shards) + " shards");
  uint64_t file_bytes = 0;
  for (const auto& [file, digest] : files.items()) file_bytes += json_member(digest, "bytes", source + ": files." + file).get<uint64_t>();
  print_row("files", std::string(kShardedIndexFile) + " + " + std::to_string(files.size()) + " rank files, " +
                         std::to_string(file_bytes) + " bytes (sizes and CRC-32 verified)");
}

void run_info(const std::string& dir) {
  HSPMD_CHECK(fs::is_directory(dir)) << "checkpoint " << dir
                                     << (fs::exists(dir) ? " is a file, not a checkpoint (a directory written by "
                                                           "`hspmd train --save`)"
                                                         : " does not exist");
  print_row("checkpoint", dir);
  const bool sharded = fs::exists(fs::path(dir) / kShardedIndexFile);
  const bool single = fs::exists(fs::path(dir) / runtime::kTrainerStateFile);
  HSPMD_CHECK(sharded || single) << dir << " is not an hspmd checkpoint: it has neither " << kShardedIndexFile
                                 << " nor " << runtime::kTrainerStateFile << " (older single-process format)";
  if (sharded) {
    const std::string source = (fs::path(dir) / kShardedIndexFile).string();
    const nlohmann::json index = parse_json_object(read_text_file(source, "checkpoint index"), source);
    const nlohmann::json& format = json_member(index, "format", source);
    HSPMD_CHECK(format == kShardedFormat) << source << ": format " << format.dump() << " is not one this build reads ("
                                          << kShardedFormat << ")";
    print_sharded(dir);
  } else {
    print_single_process(dir);
  }
}

}  // namespace

void add_checkpoint_command(CLI::App& app) {
  CLI::App* checkpoint = app.add_subcommand("checkpoint", "Inspect or export checkpoint directories");
  checkpoint->require_subcommand(1);
  auto dir = std::make_shared<std::string>();
  CLI::App* info = checkpoint->add_subcommand(
      "info",
      "Verify a checkpoint (every file's size and CRC-32) and print its format, step, model, training options, "
      "tensors and files; reads single-process and distributed checkpoints");
  info->add_option("dir", *dir, "Checkpoint directory (the --save of `hspmd train`)")->required();
  info->callback([dir] { run_info(*dir); });

  struct ExportArgs {
    std::string dir, out;
    int64_t max_shard_bytes = runtime::HfExportOptions{}.max_shard_bytes;
  };
  auto ex = std::make_shared<ExportArgs>();
  CLI::App* exp = checkpoint->add_subcommand(
      "export", "Write a checkpoint's weights as Hugging Face save_pretrained does: config.json and "
                "model.safetensors, or shards with model.safetensors.index.json when large");
  exp->add_option("dir", ex->dir, "Checkpoint directory (the --save of `hspmd train`, any strategy)")->required();
  exp->add_option("--to-hf", ex->out, "Output directory (must not exist yet)")->required();
  exp->add_option("--max-shard-bytes", ex->max_shard_bytes, "Largest safetensors file before sharding")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  exp->callback([ex] {
    const std::vector<std::string> files = runtime::export_to_hf(ex->dir, ex->out, {.max_shard_bytes = ex->max_shard_bytes});
    std::cout << "exported " << ex->dir << " to " << ex->out << ":";
    for (const std::string& f : files) std::cout << " " << f;
    std::cout << "\n";
  });
}

}  // namespace hspmd::cli
